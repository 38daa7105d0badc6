"""A shop's checkout written with stripe-python 5, pointed at paytwice.

Usage: stripe_python_checkout.py BASE_URL ORDER KEY CARD [later]
With "later", the checkout takes two steps: it creates the order's intent
unconfirmed (under a key of the order's own, so that running it again finds
the same intent), then confirms it with KEY.
Prints one JSON line: what the SDK reported, after its own retries.
"""
import json
import sys

import stripe

base, order, key, card = sys.argv[1:5]
later = sys.argv[5:6] == ["later"]
stripe.api_key, stripe.api_base = "sk_test_paytwice", base
stripe.max_network_retries = 2

try:
    if later:
        pi = stripe.PaymentIntent.create(
            amount=12900, currency="thb", confirm=False,
            metadata={"order_id": order}, idempotency_key="create-" + order)
        pi = stripe.PaymentIntent.confirm(pi.id, payment_method=card, idempotency_key=key)
    else:
        pi = stripe.PaymentIntent.create(
            amount=12900, currency="thb", confirm=True, payment_method=card,
            metadata={"order_id": order}, idempotency_key=key)
    print(json.dumps({"status": pi.status, "id": pi.id}))
except stripe.error.APIConnectionError as e:
    print(json.dumps({"error": "network"}))
except stripe.error.StripeError as e:
    err = (e.json_body or {}).get("error", {})
    print(json.dumps({"error": err.get("type", ""), "http_status": e.http_status, "request_id": e.request_id or ""}))

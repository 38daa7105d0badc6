"""A shop's checkout written with stripe-python 5, pointed at paytwice.

Usage: stripe_python_checkout.py BASE_URL ORDER KEY CARD [later]
With "later", the checkout takes two steps: it creates the order's intent
unconfirmed (under a key of the order's own, so that running it again finds
the same intent), then confirms it with KEY.
Prints one JSON line: what the SDK reported, after its own retries, and the
waits (in seconds) the SDK took between them.

With PAYTWICE_SDK_WAITS=recorded in the environment, the SDK's waits are
recorded and not slept: the retries follow each other at once, as they would
after the waits on a server whose clock stood still, which the test's server's
does.
"""
import json
import os
import sys
import time

import stripe

waits = []
slept = time.sleep


def wait(seconds):
    waits.append(round(seconds, 3))
    if os.environ.get("PAYTWICE_SDK_WAITS") != "recorded":
        slept(seconds)


time.sleep = wait  # the SDK's only clock: it sleeps between retries through time.sleep

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
    print(json.dumps({"status": pi.status, "id": pi.id, "waits": waits}))
except stripe.error.APIConnectionError as e:
    print(json.dumps({"error": "network", "waits": waits}))
except stripe.error.StripeError as e:
    err = (e.json_body or {}).get("error", {})
    print(json.dumps({"error": err.get("type", ""), "http_status": e.http_status, "request_id": e.request_id or "",
                      "waits": waits}))

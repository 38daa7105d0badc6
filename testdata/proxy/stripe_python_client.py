"""stripe-python 5 as a backend engineer uses it, pointed at paytwice proxy.

Usage: stripe_python_client.py BASE_URL N PREFIX [SEED]
Sends N payments, one SDK call each, to POST /v1/payments in the form
encoding Stripe's SDKs write, with the SDK's own key per call and two
network retries, and prints what each call ended with.
"""
import sys

import stripe
from stripe.api_requestor import APIRequestor

base, n, prefix = sys.argv[1], int(sys.argv[2]), sys.argv[3]
stripe.api_key, stripe.api_base = "sk_test_paytwice", base
stripe.max_network_retries = 2
requestor = APIRequestor()
for i in range(n):
    order = "%s-%d" % (prefix, i + 1)
    try:
        requestor.request("post", "/v1/payments", {"order_id": order, "amount_satang": 129900})
        print(order, "paid")
    except stripe.error.StripeError as e:
        print(order, type(e).__name__, e.http_status)

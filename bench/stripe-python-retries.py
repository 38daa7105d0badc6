"""Measures what stripe-python does with the retry headers: a stub answers
every attempt alike; the script counts attempts and the waits between them.
Run: python3 bench/stripe-python-retries.py (with stripe installed, e.g.
Debian's python3-stripe)."""
import http.server
import threading
import time

import stripe
from stripe import api_requestor

STRIPE_SHAPE = b'{"error":{"type":"api_error","code":"x","message":"m"}}'
PROBLEM_SHAPE = b'{"type":"/problems/x","title":"t","status":0}'
CASES = [
    ("Stripe's shape, 409, Stripe-Should-Retry true", 409, STRIPE_SHAPE, "true"),
    ("Stripe's shape, 503, Stripe-Should-Retry true", 503, STRIPE_SHAPE, "true"),
    ("Stripe's shape, 500, Stripe-Should-Retry false", 500, STRIPE_SHAPE, "false"),
    ("Stripe's shape, 409, no advice", 409, STRIPE_SHAPE, ""),
    ("problem+json, 409, Stripe-Should-Retry false", 409, PROBLEM_SHAPE, "false"),
    ("problem+json, 422, no advice", 422, PROBLEM_SHAPE, ""),
]
RETRY_AFTER = "3"

for name, status, body, advice in CASES:
    seen = []

    class Stub(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            seen.append(time.monotonic())
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Retry-After", RETRY_AFTER)
            if advice:
                self.send_header("Stripe-Should-Retry", advice)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    srv = http.server.HTTPServer(("127.0.0.1", 0), Stub)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    stripe.api_base = "http://127.0.0.1:%d" % srv.server_port
    stripe.max_network_retries = 1
    try:
        api_requestor.APIRequestor(key="sk_test_x").request("post", "/v1/payments", {"order_id": "A", "amount_satang": 1})
        outcome = "returned"
    except Exception as err:  # the typed error the caller sees
        outcome = "raised " + type(err).__name__
    srv.shutdown()
    waits = ", ".join("%.2f s" % (b - a) for a, b in zip(seen, seen[1:]))
    print("%s: %d attempts, %s%s" % (name, len(seen), outcome, ", waits " + waits if waits else ""))

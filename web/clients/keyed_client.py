#!/usr/bin/env python3
"""The article's client, corrected.

- The key belongs to the payment, not to the call: the caller makes it once
  when the customer starts paying and passes it to every call, so calling
  again after an exception retries the same payment.
- Every way a connection can fail without an answer is retried: urllib's
  URLError, and http.client's RemoteDisconnected and the other
  ConnectionErrors and OSErrors raised when a response is lost.
- An answer is final when the server says so: a replay
  (Idempotent-Replayed: true) or Stripe-Should-Retry: false, so a saved 500
  is not sent again. A 409, 429, 503 or 504 is retried after at least its
  Retry-After.

Usage: keyed_client.py URL ORDER_ID AMOUNT_SATANG KEY
Prints one line per attempt and ends with "result STATUS BODY".
"""

import json
import os
import random
import sys
import time
import urllib.error
import urllib.request

# Tests shorten the backoff (never Retry-After) by this factor.
SPEEDUP = float(os.environ.get("CLIENT_BACKOFF_SPEEDUP", "1"))

RETRY_ON = (409, 429, 503, 504)


def wait_for(retry, retry_after, base=0.5, cap=8.0):
    return max(random.uniform(0, min(cap, base * 2**retry)) / SPEEDUP, retry_after)


def post_payment(url, body, key, retries=5):
    for attempt in range(retries + 1):
        print("attempt", attempt + 1, "key", key, flush=True)
        req = urllib.request.Request(url, data=body, method="POST",
                                     headers={"Content-Type": "application/json", "Idempotency-Key": key})
        retry_after = 0.0
        try:
            with urllib.request.urlopen(req, timeout=10) as res:
                return res.status, res.read()
        except urllib.error.HTTPError as err:
            final = err.headers.get("Idempotent-Replayed") == "true" or err.headers.get("Stripe-Should-Retry") == "false"
            if final or err.code not in RETRY_ON or attempt == retries:
                return err.code, err.read()
            retry_after = float(err.headers.get("Retry-After") or 0)
        except (urllib.error.URLError, ConnectionError, OSError):
            # RemoteDisconnected is a ConnectionError: the response was lost,
            # and the key makes sending it again safe.
            if attempt == retries:
                raise
        time.sleep(wait_for(attempt, retry_after))


def main():
    url, order, amount, key = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    body = json.dumps({"order_id": order, "amount_satang": amount}).encode()
    status, answer = post_payment(url, body, key)
    print("result", status, answer.decode(), flush=True)


if __name__ == "__main__":
    main()

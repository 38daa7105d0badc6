#!/usr/bin/env python3
"""A client that behaves as the article's post_payment is described.

Rewritten from the article's description, not copied: full-jitter backoff
(base 0.5 s, cap 8 s, 5 retries), retries on 409, 429, 500, 502, 503 and
504, and two flaws the tests show on purpose:

- the key is made inside the function, so a caller that retries by calling
  it again pays under a new key;
- it catches urllib's HTTPError and URLError only. When the server closes
  the connection without an answer (the lost response), http.client raises
  RemoteDisconnected, which is neither, so the first lost response ends the
  function with an exception instead of a retry.

Usage: article_client.py URL ORDER_ID AMOUNT_SATANG
Prints one line per attempt and ends with "result STATUS BODY", or with
"exception NAME" and exit status 3.
"""

import json
import os
import random
import sys
import time
import urllib.error
import urllib.request
import uuid

# Tests shorten the backoff (never Retry-After) by this factor.
SPEEDUP = float(os.environ.get("CLIENT_BACKOFF_SPEEDUP", "1"))

RETRY_ON = (409, 429, 500, 502, 503, 504)


def wait_for(retry, base=0.5, cap=8.0):
    return random.uniform(0, min(cap, base * 2**retry))


def post_payment(url, body, retries=5):
    key = str(uuid.uuid4())  # made here: one key per call, not per payment
    for attempt in range(retries + 1):
        print("attempt", attempt + 1, "key", key, flush=True)
        req = urllib.request.Request(url, data=body, method="POST",
                                     headers={"Content-Type": "application/json", "Idempotency-Key": key})
        try:
            with urllib.request.urlopen(req, timeout=10) as res:
                return res.status, res.read()
        except urllib.error.HTTPError as err:
            if err.code not in RETRY_ON or attempt == retries:
                raise
        except urllib.error.URLError:  # no RemoteDisconnected here: it is not a URLError
            if attempt == retries:
                raise
        time.sleep(wait_for(attempt) / SPEEDUP)


def main():
    url, order, amount = sys.argv[1], sys.argv[2], int(sys.argv[3])
    body = json.dumps({"order_id": order, "amount_satang": amount}).encode()
    try:
        status, answer = post_payment(url, body)
    except Exception as err:  # what the caller of post_payment would see
        print("exception", type(err).__name__, flush=True)
        sys.exit(3)
    print("result", status, answer.decode(), flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The article's client as it describes it, in the standard library only:
post_payment makes one key per call and sends it on every attempt,
retries urllib's HTTPError when the status is 409, 429, 500, 502, 503 or
504, and URLError, with full-jitter waits (base 0.5 s, cap 8 s, five
retries). It reads no Retry-After.

What it does not catch is http.client's RemoteDisconnected (and a reset
read as ConnectionResetError): urllib raises them as they are when the
connection ends after the request was sent, so a lost response ends the
call with an exception, and the caller never learns that it paid.

Usage: article_client.py BASE_URL ACTIONS ORDER_PREFIX [SEED]
CLIENT_BACKOFF_SPEEDUP divides the waits, so a test runs in seconds.
"""

import json
import os
import random
import sys
import time
import urllib.error
import urllib.request
import uuid

SPEEDUP = float(os.environ.get("CLIENT_BACKOFF_SPEEDUP", "1"))
RETRY_ON = {409, 429, 500, 502, 503, 504}


def backoff(n, base=0.5, cap=8.0):
    return random.uniform(0, min(cap, base * 2**n))


def post_payment(url, data, max_retries=5):
    key = str(uuid.uuid4())  # once per call, the same on every attempt
    for n in range(max_retries + 1):
        req = urllib.request.Request(url, data=data, method="POST", headers={
            "Content-Type": "application/json", "Idempotency-Key": key,
            "User-Agent": "paytwice-testclient/article"})
        try:
            with urllib.request.urlopen(req, timeout=10) as res:
                return res.status, res.read()
        except urllib.error.HTTPError as err:
            if err.code not in RETRY_ON or n == max_retries:
                raise
        except urllib.error.URLError:
            if n == max_retries:
                raise
        time.sleep(backoff(n) / SPEEDUP)


def main():
    base_url, actions, prefix = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    if len(sys.argv) > 4:
        random.seed(int(sys.argv[4]))
    for i in range(1, actions + 1):
        body = json.dumps({"order_id": "%s-%d" % (prefix, i), "amount_satang": 129900}).encode()
        try:
            status, _ = post_payment(base_url + "/v1/payments", body)
            print("action", i, "ended with", status, flush=True)
        except Exception as err:  # what the caller sees; it moves on
            print("action", i, "exception", type(err).__name__, flush=True)


if __name__ == "__main__":
    main()

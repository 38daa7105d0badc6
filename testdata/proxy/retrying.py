#!/usr/bin/env python3
"""A careful payments client, and the base of the clients that make one
mistake each (the other files in this directory).

It makes one key when an action starts and sends it on every attempt;
retries a failed connection, 408, 409, 425, 429 and 5xx only; waits with
full jitter, uniform(0, min(cap, base * 2**n)), and never less than a
Retry-After; and gives up once its attempts or its time budget run out.

Usage: CLIENT.py BASE_URL ACTIONS ORDER_PREFIX [SEED]
Pays ACTIONS orders, ORDER_PREFIX-1 and on, one after the other, and
prints one line per attempt and one per action's end.
"""

import http.client
import json
import random
import sys
import time
import urllib.parse
import uuid


class Client:
    name = "careful"
    base = 0.05  # seconds: the first wait's ceiling
    cap = 0.4  # seconds: no wait's ceiling goes above it
    max_retries = 5
    budget = 10.0  # seconds an action may take, waits included

    def __init__(self, base_url, seed):
        self.url = urllib.parse.urlsplit(base_url)
        self.rng = random.Random(seed)

    # The knobs each mistake turns.

    def new_key(self):
        return str(uuid.uuid4())

    def key_for_retry(self, key, last_status):
        return key

    def retryable(self, status):
        return status in (408, 409, 425, 429) or 500 <= status <= 599

    def backoff(self, n):
        return self.rng.uniform(0, min(self.cap, self.base * 2**n))

    def wait(self, n, retry_after):
        return max(self.backoff(n), retry_after or 0)

    def gives_up(self, retries_done, elapsed, next_wait):
        return retries_done >= self.max_retries or elapsed + next_wait > self.budget

    # The loop itself.

    def attempt(self, key, body):
        conn = http.client.HTTPConnection(self.url.hostname, self.url.port, timeout=10)
        try:
            conn.request("POST", "/v1/payments", body=body, headers={
                "Content-Type": "application/json",
                "Idempotency-Key": key,
                "User-Agent": "paytwice-testclient/" + self.name,
            })
            res = conn.getresponse()
            res.read()
            return res.status, res.getheader("Retry-After"), res.getheader("Idempotent-Replayed") == "true"
        except (OSError, http.client.HTTPException) as err:
            print("  no answer:", type(err).__name__, flush=True)
            return None, None, False
        finally:
            conn.close()

    def pay(self, order, amount):
        body = json.dumps({"order_id": order, "amount_satang": amount})
        key = self.new_key()
        start = time.monotonic()
        retries = 0
        while True:
            status, retry_after, replayed = self.attempt(key, body)
            print("attempt", retries + 1, "key", key, "status", status, flush=True)
            if status is not None and (replayed or not self.retryable(status)):
                return status
            hint = float(retry_after) if retry_after and retry_after.isdigit() else 0
            wait = self.wait(retries, hint)
            if self.gives_up(retries, time.monotonic() - start, wait):
                return status
            time.sleep(wait)
            retries += 1
            key = self.key_for_retry(key, status)


def main(cls):
    base_url, actions, prefix = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    seed = int(sys.argv[4]) if len(sys.argv) > 4 else None
    client = cls(base_url, seed)
    for i in range(1, actions + 1):
        status = client.pay("%s-%d" % (prefix, i), 129900)
        print("action", i, "ended with", status, flush=True)


if __name__ == "__main__":
    main(Client)

#!/usr/bin/env python3
"""The article's in-process pay(), rebuilt from its description, timed.

The article keeps idempotency keys in SQLite with Python's standard sqlite3
module and nothing else: one connection in autocommit mode (so the default
rollback journal and synchronous=FULL), a key table whose primary key
decides who claims, and a charges table with a unique key as the second
guard. A new payment takes two IMMEDIATE transactions: one claims the key
as started, one records the charge and saves the response on the key. A
repeated key reads the saved answer back. There is no server, no network
and no gateway: this is the cheapest version of the protocol, which is why
paytwice over HTTP is compared against it.

Usage: python3 bench/article_pay.py [-n PAYMENTS | -d SECONDS] [--replays N] [--db FILE]
"""

import argparse
import hashlib
import json
import os
import sqlite3
import tempfile
import time

SCHEMA = """
CREATE TABLE IF NOT EXISTS idempotency_keys (
  key TEXT PRIMARY KEY, request_hash TEXT NOT NULL, status TEXT NOT NULL,
  response_code INTEGER, response_body TEXT, created_at INTEGER NOT NULL
) STRICT;
CREATE TABLE IF NOT EXISTS charges (
  id INTEGER PRIMARY KEY, idempotency_key TEXT NOT NULL UNIQUE,
  order_id TEXT NOT NULL, amount_satang INTEGER NOT NULL
) STRICT;
"""


class Payments:
    def __init__(self, path):
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.executescript(SCHEMA)

    def pay(self, key, body):
        digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        won = db.execute(
            "INSERT INTO idempotency_keys (key, request_hash, status, created_at)"
            " VALUES (?, ?, 'started', ?) ON CONFLICT (key) DO NOTHING RETURNING key",
            (key, digest, int(time.time())),
        ).fetchone()
        if won is None:
            saved = db.execute(
                "SELECT request_hash, status, response_code, response_body"
                " FROM idempotency_keys WHERE key = ?",
                (key,),
            ).fetchone()
            db.execute("COMMIT")
            if saved[0] != digest:
                return 422, {"error": "key reused with a different body"}
            if saved[1] == "started":
                return 409, {"error": "request still in progress"}
            return saved[2], json.loads(saved[3])
        db.execute("COMMIT")

        db.execute("BEGIN IMMEDIATE")
        charge = db.execute(
            "INSERT INTO charges (idempotency_key, order_id, amount_satang) VALUES (?, ?, ?)",
            (key, body["order_id"], body["amount_satang"]),
        ).lastrowid
        answer = {"charge_id": charge, "status": "paid"}
        db.execute(
            "UPDATE idempotency_keys SET status = 'done', response_code = 201,"
            " response_body = ? WHERE key = ?",
            (json.dumps(answer), key),
        )
        db.execute("COMMIT")
        return 201, answer


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=2000, help="new payments to time")
    ap.add_argument("-d", type=float, default=0, help="pay for this many seconds instead of -n payments")
    ap.add_argument("--replays", type=int, default=20000, help="replays of those keys to time")
    ap.add_argument("--db", help="database file (default: a new one in a temporary folder)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        p = Payments(args.db or os.path.join(tmp, "app.db"))
        run = os.urandom(4).hex()
        keys, bodies = [], []
        t0 = time.perf_counter()
        while (len(keys) < args.n) if args.d <= 0 else (time.perf_counter() - t0 < args.d):
            k = f"article-{run}-{len(keys)}"
            b = {"order_id": k, "amount_satang": 1000}
            status, _ = p.pay(k, b)
            assert status == 201, status
            keys.append(k)
            bodies.append(b)
        new = time.perf_counter() - t0
        n = len(keys)

        t0 = time.perf_counter()
        for i in range(args.replays):
            status, _ = p.pay(keys[i % n], bodies[i % n])
            assert status == 201, status
        replay = time.perf_counter() - t0

    print(f"article pay(), in-process, sqlite3 {sqlite3.sqlite_version}, synchronous=FULL (the module's defaults)")
    print(f"new payments  {n} in {new:.2f} s: {n / new:.0f} payments/s")
    print(f"replays       {args.replays} in {replay:.2f} s: {args.replays / replay:.0f} replays/s")


if __name__ == "__main__":
    main()

"""The workshop's reference endpoint, POST /v1/payments safe to retry, in
Python 3's standard library. GATEWAY is the gateway address the workshop
page shows; ADDR where to listen (default :8000)."""
import hashlib, json, os, threading, urllib.error, urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

lock, keys = threading.Lock(), {}  # (caller, key) -> [fingerprint, status, body]; status 0 while at work


class Payments(BaseHTTPRequestHandler):
    def reply(self, status, body, kind="application/json", headers=()):
        self.send_response(status)
        for name, value in [("Content-Type", kind), ("Content-Length", str(len(body))), *headers]:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def problem(self, status, title):
        body = json.dumps({"title": title, "status": status}).encode()
        self.reply(status, body, "application/problem+json", [("Retry-After", "1")])

    def do_POST(self):
        key, size = self.headers.get("Idempotency-Key", ""), int(self.headers.get("Content-Length") or 0)
        try:
            p = json.loads(self.rfile.read(min(size, 4096)))
            order, amount = p["order_id"], p["amount_satang"]
            assert self.path == "/v1/payments" and 0 < len(key) <= 255 and isinstance(order, str) and order
            assert type(amount) is int and amount > 0
        except Exception:
            return self.problem(400, "send an Idempotency-Key and {order_id, amount_satang}")  # nothing saved
        scoped, fp = self.headers.get("Authorization", "") + "\n" + key, json.dumps([order, amount])
        with lock:  # look the key up and claim it in one step
            seen = keys.get(scoped)
            if seen is None:
                keys[scoped] = [fp, 0, b""]
            else:
                seen = list(seen)
        if seen and seen[0] != fp:
            return self.problem(422, "this key was used for another payment")
        if seen and seen[1] == 0:
            return self.problem(409, "this key's first request is still running")
        if seen:
            return self.reply(seen[1], seen[2], headers=[("Idempotent-Replayed", "true")])
        # The gateway is idempotent too: the same key for every try finds the same charge,
        # so an answer lost on the way back is asked for again.
        req = urllib.request.Request(os.environ["GATEWAY"] + "/charges", method="POST",
                                     data=json.dumps({"order_id": order, "amount": amount}).encode(),
                                     headers={"Idempotency-Key": hashlib.sha256(scoped.encode()).hexdigest(),
                                              "Content-Type": "application/json"})
        charge = None
        for _ in range(3):
            try:
                with urllib.request.urlopen(req, timeout=10) as res:
                    charge = json.load(res)
                break
            except urllib.error.HTTPError:
                break  # the gateway answered, with a refusal
            except Exception:
                continue  # no answer: ask again with the same key
        if charge is None:
            with lock:
                del keys[scoped]  # release the key: a retry asks the gateway again, with the same key
            return self.problem(502, "the gateway did not confirm the charge: retry with the same key")
        body = json.dumps({"charge_id": charge["id"], "status": "paid", "order_id": order, "amount_satang": amount}).encode()
        with lock:
            keys[scoped] = [fp, 201, body]
        self.reply(201, body)


host, _, port = os.environ.get("ADDR", ":8000").rpartition(":")
ThreadingHTTPServer((host, int(port)), Payments).serve_forever()

"""The workshop's reference endpoint: POST /v1/payments, safe to retry (Python 3's library).
GATEWAY is the gateway address the workshop page shows; ADDR where to listen (:8000)."""
import hashlib
import json
import os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.error import HTTPError
from urllib.request import Request, urlopen

keys = {}  # by caller and key: [payment, its answer (None while its first request runs)]


class Payments(BaseHTTPRequestHandler):
    def pay(self):  # the answer's status and body
        key = self.headers.get("Idempotency-Key", "")
        try:
            p = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            payment = {"order_id": p["order_id"], "amount": p["amount_satang"]}
        except Exception:  # not a payment: nothing is saved
            return 400, {"error": "send {order_id, amount_satang} as JSON"}
        if not 0 < len(key) <= 255:
            return 400, {"error": "send an Idempotency-Key of 1 to 255 characters"}
        scoped, mine = self.headers.get("Authorization", "") + "\n" + key, [payment, None]
        seen = keys.setdefault(scoped, mine)  # looked up and claimed in one atomic step
        if seen is not mine and seen[0] != payment:
            return 422, {"error": "this key was used for another payment"}
        if seen is not mine:  # the saved answer, or 409 while the first request runs
            return (201, seen[1]) if seen[1] else (409, {"error": "this key's payment is running"})
        # The gateway's key is made from the caller's: asking again never charges twice.
        req = Request(os.environ["GATEWAY"] + "/charges", json.dumps(payment).encode())
        req.add_header("Idempotency-Key", hashlib.sha256(scoped.encode()).hexdigest())
        for _ in range(2):  # asked once more unless it charged or refused
            try:
                with urlopen(req, timeout=10) as res:  # a 4xx or a 5xx raises HTTPError
                    mine[1] = {"charge_id": json.loads(res.read())["id"], "status": "paid"}
                return 201, mine[1]  # charged: the answer is kept for every replay
            except HTTPError as answer:
                if answer.code // 100 == 4:  # refused (a declined card): asking again is no use
                    del keys[scoped]  # released, as nothing was charged
                    return answer.code, {"error": "the gateway refused the charge"}
            except Exception:  # no answer, or no charge in it
                pass
        del keys[scoped]  # not confirmed: the key is free again, and the same key finds any charge
        return 502, {"error": "the gateway did not answer: retry with the same key"}

    def do_POST(self):
        status, body = self.pay()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        if status in (409, 502):  # worth sending again, with the same key
            self.send_header("Retry-After", "1")
        self.end_headers()
        self.wfile.write(json.dumps(body).encode())


host, _, port = os.environ.get("ADDR", ":8000").rpartition(":")
ThreadingHTTPServer((host, int(port)), Payments).serve_forever()

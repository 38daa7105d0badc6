"""The workshop's reference endpoint, POST /v1/payments safe to retry, in Python's standard library.
GATEWAY is the gateway address the workshop page shows; ADDR where to listen (default :8000)."""
import hashlib, json, os, urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

keys = {}  # by caller and key: {"payment": (order, amount), "answer": None while its first request is at work}
gateway = urllib.request.OpenerDirector()  # gives every answer as it is: a 4xx raises nothing, no redirect is followed
gateway.add_handler(urllib.request.HTTPHandler())


class Payments(BaseHTTPRequestHandler):
    def do_POST(self):  # decides the answer; reply writes it
        try:
            key, p = self.headers["Idempotency-Key"], json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            order, amount = p["order_id"], p["amount_satang"]
            if not (0 < len(key) <= 255 and type(order) is str and order and type(amount) is int and amount > 0):
                raise ValueError
        except Exception:  # no key, no JSON, not a payment: nothing is saved
            return self.reply(400, "send an Idempotency-Key and {order_id, amount_satang}")
        scoped, mine = self.headers.get("Authorization", "") + "\n" + key, {"payment": (order, amount), "answer": None}
        seen = keys.setdefault(scoped, mine)  # looked up and claimed in one step: dict.setdefault is atomic
        if seen is not mine and seen["payment"] != mine["payment"]:
            return self.reply(422, "this key was used for another payment")
        if seen is not mine and seen["answer"] is None:
            return self.reply(409, "this key's first request is still running", ("Retry-After", "1"))
        if seen is not mine:
            return self.reply(201, seen["answer"], ("Idempotent-Replayed", "true"))
        # The gateway's key is made from the caller's: asking again finds the charge made, not a new one.
        req = urllib.request.Request(os.environ["GATEWAY"] + "/charges", json.dumps({"order_id": order, "amount": amount}).encode(),
                                     {"Idempotency-Key": hashlib.sha256(scoped.encode()).hexdigest()})
        for _ in range(2):  # no answer, or a 5xx: ask once more
            status, charge = 0, None
            try:
                with gateway.open(req, timeout=10) as res:
                    status = res.status
                    charge = json.loads(res.read())["id"]
            except Exception:  # no answer, or no charge in it: its status counts all the same
                pass
            if 0 < status < 500:
                break
        if 200 <= status < 300 and type(charge) is str and charge:  # charged: the answer is kept for every replay
            mine["answer"] = json.dumps({"charge_id": charge, "status": "paid", "order_id": order, "amount_satang": amount})
            return self.reply(201, mine["answer"])
        del keys[scoped]  # released: a retry asks the gateway again with the same key, which finds any charge already made
        if 400 <= status < 500:  # refused (a declined card): asking again changes nothing
            return self.reply(status, "the gateway refused the charge")
        self.reply(502, "the gateway did not confirm the charge: retry with the same key", ("Retry-After", "1"))

    def reply(self, status, body, *headers):  # a refusal (a status of 400 or more) is a title, sent as problem+json
        self.send_response(status)
        for name, value in [("Content-Type", "application/problem+json" if status >= 400 else "application/json"), *headers]:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write((json.dumps({"title": body, "status": status}) if status >= 400 else body).encode())


host, _, port = os.environ.get("ADDR", ":8000").rpartition(":")
ThreadingHTTPServer((host, int(port)), Payments).serve_forever()

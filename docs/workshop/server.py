"""The workshop's reference endpoint, POST /v1/payments safe to retry, in Python's standard library.
GATEWAY is the gateway address the workshop page shows; ADDR where to listen (default :8000)."""
import hashlib, json, os, urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

keys = {}  # by caller and key: [the payment, its answer (None while the first request is at work)]
gateway = urllib.request.OpenerDirector()  # gives every answer as it is: a 4xx raises nothing, a redirect is not followed
gateway.add_handler(urllib.request.HTTPHandler())


def pay(path, headers, body):  # -> status, body (or a refusal's reason), headers
    try:
        key, p = headers.get("Idempotency-Key", ""), json.loads(body)
        payment = [p["order_id"], p["amount_satang"]]
        if not (path == "/v1/payments" and 0 < len(key) <= 255 and [type(v) for v in payment] == [str, int] and payment[0] and payment[1] > 0):
            raise ValueError("a bad request")
    except Exception:
        return 400, "send an Idempotency-Key and {order_id, amount_satang}", {}  # nothing saved
    scoped = headers.get("Authorization", "") + "\n" + key
    mine = [payment, None]
    seen = keys.setdefault(scoped, mine)  # looked up and claimed in one step: dict.setdefault is atomic
    if seen is not mine and seen[0] != payment:
        return 422, "this key was used for another payment", {}
    if seen is not mine:
        return (201, seen[1], {"Idempotent-Replayed": "true"}) if seen[1] else (409, "this key's first request is still running", {"Retry-After": "1"})
    # The gateway's key is made from the caller's: asking again (no answer came, or the client retries) finds the charge made.
    req = urllib.request.Request(os.environ["GATEWAY"] + "/charges", json.dumps({"order_id": payment[0], "amount": payment[1]}).encode(),
                                 {"Idempotency-Key": hashlib.sha256(scoped.encode()).hexdigest(), "Content-Type": "application/json"})
    for _ in range(3):  # no answer, or a 5xx: ask again, with the same key
        status, charge = 0, {}
        try:
            with gateway.open(req, timeout=10) as res:
                status = res.status
                charge = json.loads(res.read())
        except Exception:
            pass  # no answer, or a body that is no JSON: its status counts all the same
        if 0 < status < 500:
            break
    charge = charge if isinstance(charge, dict) else {}
    if 200 <= status < 300 and isinstance(charge.get("id"), str) and charge["id"]:  # a 4xx is a refusal, whatever its body
        answer = json.dumps({"charge_id": charge["id"], "status": "paid", "order_id": payment[0], "amount_satang": payment[1]})
        mine[1] = answer  # kept for every replay
        return 201, answer, {}
    del keys[scoped]  # released: nothing was charged; a retry asks the gateway again, with the same key
    if 400 <= status < 500:  # refused (a declined card): asking again changes nothing
        return status, "the gateway refused the charge: " + (charge["error"] if isinstance(charge.get("error"), str) else ""), {}
    return 502, "the gateway did not confirm the charge: retry with the same key", {"Retry-After": "1"}


class Payments(BaseHTTPRequestHandler):
    def do_POST(self):
        length = self.headers.get("Content-Length") or "0"  # at most 4 KiB is read; another length is no body
        status, body, headers = pay(self.path, self.headers, self.rfile.read(int(length)) if length.isdecimal() and int(length) <= 4096 else b"")
        if status >= 400:  # a refusal, as problem+json
            body, headers["Content-Type"] = json.dumps({"title": body, "status": status}), "application/problem+json"
        self.send_response(status)
        for name, value in {"Content-Type": "application/json", "Content-Length": len(body.encode()), **headers}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body.encode())


host, _, port = os.environ.get("ADDR", ":8000").rpartition(":")
ThreadingHTTPServer((host, int(port)), Payments).serve_forever()

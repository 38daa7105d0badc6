// Run: npm install stripe && node bench/stripe-node-retries.cjs (stripe-node 23.1 measured for the README).
// Measures what stripe-node does with the retry headers: a stub answers
// every attempt alike; the script counts attempts and the waits between.
const http = require("http");
const Stripe = require("stripe");
const stripeShape = '{"error":{"type":"api_error","code":"x","message":"m"}}';
const problemShape = '{"type":"/problems/x","title":"t","status":0}';
const cases = [
  ["Stripe's shape, 409, Stripe-Should-Retry true", 409, stripeShape, "true"],
  ["Stripe's shape, 503, Stripe-Should-Retry true", 503, stripeShape, "true"],
  ["Stripe's shape, 500, no advice", 500, stripeShape, ""],
  ["Stripe's shape, 500, Stripe-Should-Retry false", 500, stripeShape, "false"],
  ["Stripe's shape, 409, no advice", 409, stripeShape, ""],
  ["problem+json, 409, Stripe-Should-Retry false", 409, problemShape, "false"],
  ["problem+json, 422, no advice", 422, problemShape, ""],
  ["problem+json, 400, Stripe-Should-Retry true", 400, problemShape, "true"],
];
(async () => {
  for (const [name, status, body, retry] of cases) {
    const at = [];
    const srv = http.createServer((req, res) => {
      at.push(Date.now()); req.resume();
      const h = {"Content-Type": status >= 400 && body === problemShape ? "application/problem+json" : "application/json", "Retry-After": "30"};
      if (retry) h["Stripe-Should-Retry"] = retry;
      res.writeHead(status, h); res.end(body);
    });
    await new Promise(r => srv.listen(0, "127.0.0.1", r));
    const stripe = new Stripe("sk_test_x", {host: "127.0.0.1", port: srv.address().port, protocol: "http", maxNetworkRetries: 1});
    let outcome;
    try { const r = await stripe.rawRequest("POST", "/v1/payments", {order_id: "A", amount_satang: 1}); outcome = "resolved " + JSON.stringify(r).slice(0, 60); }
    catch (e) { outcome = "rejected " + e.type; }
    srv.close();
    const waits = at.slice(1).map((t, i) => (t - at[i]) + " ms");
    console.log(`${name}: ${at.length} attempts, ${outcome}${waits.length ? ", waits " + waits.join(", ") : ""}`);
  }
})();

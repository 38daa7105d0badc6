// A shop's checkout written with stripe-node, pointed at paytwice.
// Usage: node checkout.cjs BASE_URL ORDER KEY CARD [later]
// With "later", the checkout takes two steps: it creates the order's intent
// unconfirmed (under a key of the order's own, so that running it again
// finds the same intent), then confirms it with KEY.
// Prints one JSON line: what the SDK reported, after its own retries.
const Stripe = require("stripe");
const [base, order, key, card, mode] = process.argv.slice(2);
const url = new URL(base);
const stripe = new Stripe("sk_test_paytwice", {
  host: url.hostname, port: Number(url.port), protocol: "http", maxNetworkRetries: 2,
});
const pay = mode === "later"
  ? stripe.paymentIntents.create(
    { amount: 12900, currency: "thb", confirm: false, metadata: { order_id: order } },
    { idempotencyKey: "create-" + order },
  ).then((pi) => stripe.paymentIntents.confirm(pi.id, { payment_method: card }, { idempotencyKey: key }))
  : stripe.paymentIntents.create(
    { amount: 12900, currency: "thb", confirm: true, payment_method: card, metadata: { order_id: order } },
    { idempotencyKey: key },
  );
pay.then((pi) => {
  console.log(JSON.stringify({ status: pi.status, id: pi.id }));
}, (e) => {
  report(e);
}).finally(() => process.exit(0)); // the SDK's keep-alive agent would hold the process open

function report(e) {
  if (e.type === "StripeConnectionError") {
    console.log(JSON.stringify({ error: "network" }));
    return;
  }
  const raw = e.raw || {};
  console.log(JSON.stringify({ error: raw.type || "", http_status: e.statusCode || 0, request_id: e.requestId || "" }));
}

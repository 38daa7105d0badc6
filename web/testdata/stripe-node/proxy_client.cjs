// stripe-node as a backend engineer uses it, pointed at paytwice proxy.
// Usage: node proxy_client.cjs BASE_URL N PREFIX
// Sends N payments, one SDK call each, to POST /v1/payments in the form
// encoding Stripe's SDKs write, with the SDK's own key per call and two
// network retries, and prints what each call ended with.
const Stripe = require("stripe");
const [base, n, prefix] = process.argv.slice(2);
const url = new URL(base);
const stripe = new Stripe("sk_test_paytwice", {
  host: url.hostname, port: Number(url.port), protocol: "http", maxNetworkRetries: 2,
});
(async () => {
  for (let i = 1; i <= Number(n); i++) {
    const order = `${prefix}-${i}`;
    try {
      await stripe.rawRequest("POST", "/v1/payments", { order_id: order, amount_satang: 129900 });
      console.log(order, "paid");
    } catch (e) {
      console.log(order, e.type, e.statusCode || 0);
    }
  }
})().finally(() => process.exit(0)); // the SDK's keep-alive agent would hold the process open

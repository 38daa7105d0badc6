package web

import (
	_ "embed"
	"net/http"

	"github.com/labstack/echo/v4"

	"paytwice/views"
)

// The article's Python client as it is described, and corrected. The
// page shows them; the root package's test runs them against a server.
var (
	//go:embed clients/article_client.py
	articleClientSource string
	//go:embed clients/keyed_client.py
	keyedClientSource string
)

// measuredSDKs is what Stripe's SDKs do with the retry headers, as
// TestStripeGoSDKRetryRules, bench/stripe-node-retries.cjs and
// bench/stripe-python-retries.py measured.
var measuredSDKs = []views.ClientSDK{
	{Name: "stripe-go v85", StripeShape: "retried only as a 429 with code lock_timeout; Stripe-Should-Retry not looked at: a 409, 503 or 504 comes back at once as a *stripe.Error",
		OtherShape: "always retried, whatever the status and Stripe-Should-Retry", RetryAfter: "never read", Wait: "0.5 s, then 0.5 s·(1+n²) up to 5 s"},
	{Name: "stripe-node 23.1", StripeShape: "Stripe-Should-Retry decides (false stops even a 500); without it, 409 and 5xx are retried",
		OtherShape: "the same, but a 4xx problem body resolves as if it were a success", RetryAfter: "never read", Wait: "0.5 s, growing"},
	{Name: "stripe-python 5.0", StripeShape: "Stripe-Should-Retry decides; without it, 409 and 5xx are retried",
		OtherShape: "the same; the error raised is a plain APIError", RetryAfter: "waited, when 60 s or less", Wait: "0.5 s, doubling, never below Retry-After"},
}

// handleClients is GET /clients: what real clients do against this server.
func handleClients(c echo.Context) error {
	return render(c, http.StatusOK, views.ClientsPage(measuredSDKs, articleClientSource, keyedClientSource))
}

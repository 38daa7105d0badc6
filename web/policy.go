package web

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"paytwice/pay"
)

// Policy is the published key policy, as the IETF draft asks servers to
// publish their key expiry.
type Policy struct {
	Header               string   `json:"header"`
	Required             []string `json:"required_on"`
	Formats              []string `json:"formats"`
	MinLength            int      `json:"min_length"`
	MaxLength            int      `json:"max_length"`
	Characters           string   `json:"characters"`
	Scope                string   `json:"scope"`
	RetentionSeconds     int64    `json:"retention_seconds"`
	Retention            string   `json:"retention"`
	LockTimeoutSeconds   int64    `json:"lock_timeout_seconds"`
	RetryAfterSeconds    int      `json:"retry_after_seconds_on_409"`
	Fingerprint          string   `json:"fingerprint"`
	Saved                []string `json:"saved_and_replayed"`
	NotSaved             []string `json:"not_saved"`
	StartedKeys          string   `json:"started_keys"`
	KeyReuse             string   `json:"key_reuse_after_retention"`
	ReplayedHeader       string   `json:"replayed_header"`
	RecommendedKeyFormat string   `json:"recommended_key"`
}

// policy describes the server's rules from its configuration.
func (h referenceHandlers) policy() Policy {
	return Policy{
		Header:     "Idempotency-Key",
		Required:   []string{"POST " + paymentsPath},
		Formats:    []string{`structured-field string, e.g. "8e03978e-40d5-43e8-bc93-6894a57f9324"`, "bare token, e.g. 8e03978e-40d5-43e8-bc93-6894a57f9324"},
		MinLength:  1,
		MaxLength:  pay.MaxKeyLength,
		Characters: "visible ASCII (0x21-0x7E); one header line",
		Scope:      "per caller: the Bearer token (scheme in any case, then spaces or tabs, then visible ASCII), else the browser session, else the shared anonymous scope (no Authorization header); any other Authorization header is 401",

		RetentionSeconds:     int64(h.retention.Seconds()),
		Retention:            "done keys are pruned once older than " + h.retention.String() + "; within that window a retry gets the saved answer, after it the key's saved answer is forgotten and only its charge is kept (key_reuse_after_retention)",
		LockTimeoutSeconds:   int64(h.lockTimeout.Seconds()),
		RetryAfterSeconds:    retryAfterSeconds,
		Fingerprint:          "SHA-256 of method, path and canonical body (a form body and its JSON twin are one request); a different fingerprint on the same key is 422",
		Saved:                []string{"201 Created", "402 payment declined", "500 server error after the work started", "502 gateway error", "422 when the gateway already held this key's charge for another order (that charge is recorded)"},
		NotSaved:             []string{"400 invalid key or body", "409 still running", "413", "415", "422 key reused with another request, or for another order once its key row was pruned", "503 interrupted before anything happened", "504 outcome unknown: the key stays started for the sweeper"},
		StartedKeys:          "never pruned; the sweeper asks the gateway and closes them after the lock timeout, never while their request is still running",
		KeyReuse:             "a key pays for one order: once its key row is pruned, the same key with the same order and amount answers that order's charge (201), with another order or amount it is refused with 422 naming the order and the date it was paid; nothing is charged again and nothing is saved",
		ReplayedHeader:       "Idempotent-Replayed: true",
		RecommendedKeyFormat: "a random UUID v4, created once per payment action and reused on every retry",
	}
}

// handlePolicy is GET /v1/idempotency-policy.
func (h referenceHandlers) handlePolicy(c echo.Context) error {
	return c.JSON(http.StatusOK, h.policy())
}

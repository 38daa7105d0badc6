package check

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Config says what to test and how.
type Config struct {
	// URL is the endpoint: every case POSTs to it.
	URL string
	// Body is the request body; {{id}} becomes a fresh value per action
	// and {{amount}} an integer the checker may change. Form sends it as
	// application/x-www-form-urlencoded instead of JSON.
	Body string
	Form bool
	// Header is sent with every request (auth and the like).
	Header http.Header
	// OtherAuth is a second caller's Authorization, for case 7.
	OtherAuth string
	// KeyHeader names the key's header (Idempotency-Key).
	KeyHeader string
	// CountURL (with {{id}}) lists one action's effects; CountField is
	// the top-level field holding their array ("" for a bare array).
	CountURL, CountField string
	// Gateway is the base URL of the simulated gateway the endpoint
	// charges through: its books count the effects, and its switches
	// make requests slow or cut.
	Gateway string
	// GatewayToken, when set, is sent as GatewayTokenHeader with every
	// change of the gateway's switches: a paytwice server with a presenter
	// token lets only its presenter flip them.
	GatewayToken string
	// Storm is how many requests share one key in case 4.
	Storm int
	// Seed makes the keys and ids, and so a run, repeatable.
	Seed uint64
	// Unguessable draws the run's keys and the prefix of its ids from
	// crypto/rand, 128 bits each, instead of from Seed: for a run whose
	// requests others watch (a classroom's timeline), so that nobody can
	// guess or foresee one and send it first. Such a run is not
	// repeatable.
	Unguessable bool
	// Timeout bounds each request.
	Timeout time.Duration
	// Patience is how long a retry keeps going while the key's first
	// request is still running (409, 429, 5xx): a request whose outcome
	// the server does not know may hold its key until a sweeper closes
	// it, for the lock timeout the server publishes.
	Patience time.Duration
	// ReplayAfter is how long case 1 waits before its replay (0: at once).
	ReplayAfter time.Duration
	// Wait waits d; nil sleeps. Tests make it move a server's clock.
	Wait func(ctx context.Context, d time.Duration) error
	// RetryWait waits d (a Retry-After, or a back-off) before a retry of
	// a key whose first request may still be running; nil sleeps. A test
	// whose server is in its own process makes it wait for that server to
	// have no request at work instead, which is what the wait is for.
	RetryWait func(ctx context.Context, d time.Duration) error
	// Only, when set, runs only these cases.
	Only []int

	// Rounds is how many storms of one key case 4 sends, each with a key
	// of its own: a race window of a millisecond is missed by one storm
	// now and then, never by all of them.
	Rounds int
	// OtherPath is a second POST path of the API (such as /v1/refunds):
	// case 3 sends the key of a payment there too.
	OtherPath string
	// Profile names the conventions a DIFFERS is measured against:
	// "draft" (the IETF draft, the default) or "stripe".
	Profile string
	// Strict makes a run whose cases only differ from the profile exit 3.
	Strict bool
	// MaxHeaderBytes and MaxBodyBytes bound what is read of one answer;
	// Timeout bounds the time it takes. An answer past a bound is not
	// compared, and its case says so.
	MaxHeaderBytes, MaxBodyBytes int64
	// VerifyTimeout bounds the check of the history.
	VerifyTimeout time.Duration
	// Insecure skips the verification of the endpoint's TLS certificate;
	// RootCAs, when set, is the only set of authorities trusted.
	Insecure bool
	RootCAs  *x509.CertPool

	// Dial, when set, makes every connection to the endpoint (its
	// payments, its policy, the requests written by hand): a caller that
	// runs the checker for others decides there which addresses may be
	// reached, after the name is resolved.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// NoRedirects answers a redirect as it is instead of following it:
	// a payment endpoint has no business sending the checker elsewhere.
	NoRedirects bool
	// GatewayTransport, when set, carries every request to Gateway (its
	// books and switches) instead of the network: a server that runs the
	// checker against its own simulated gateway reaches it in process.
	GatewayTransport http.RoundTripper
	// OnResult, when set, is told each case's verdict as soon as it is
	// known, before the run ends: a scoreboard shows a run in progress.
	OnResult func(Result)
	// OnSafety, when set, is told a safety failure the moment a case is
	// sure of it, before the case ends: a storm's second payment for one
	// key, while the rest of the storm is still to answer. A scoreboard
	// shows it at once instead of after the slowest answer (a storm of 20
	// waits for 20 charges). The case's verdict follows through OnResult
	// and has the last word: it says more (the whole storm's tally), and
	// should a later answer go past a bound the case is not decided.
	OnSafety func(Result)
}

// DefaultBody is paytwice's own request body.
const DefaultBody = `{"order_id":"{{id}}","amount_satang":{{amount}}}`

// Defaults of the flags.
const (
	DefaultStorm     = 20
	DefaultTimeout   = 10 * time.Second
	DefaultPatience  = time.Minute
	DefaultKeyHeader = "Idempotency-Key"
	// PresenterHeader is the header a paytwice class server knows its
	// presenter by; the commands that can act as the presenter send it.
	PresenterHeader = "X-Presenter-Token"
	// GatewayTokenHeader carries Config.GatewayToken: the presenter's
	// header, since the simulated gateway takes changes only from them.
	GatewayTokenHeader = PresenterHeader
	maxStorm           = 500
	// DefaultRounds storms of one key catch a claim that reads, then
	// writes 1 ms later, in every one of 20 runs on two busy cores.
	DefaultRounds = 5
	maxRounds     = 100
	// DefaultMaxHeaderBytes fits any real API's headers many times over.
	DefaultMaxHeaderBytes = 64 << 10
	// DefaultMaxBodyBytes fits any real API's answer to one payment.
	DefaultMaxBodyBytes  = 1 << 20
	DefaultVerifyTimeout = 20 * time.Second
	// keepBytes is how much of each answer's body a record keeps: the
	// whole body is compared by its hash, the start of it is for reading.
	keepBytes = 16 << 10
	// probeTimeout bounds the first payment: an endpoint that does not
	// take it stops the run within 10 s.
	probeTimeout = 8 * time.Second
	maxRetryWait = 5 * time.Second // the longest Retry-After honoured
	maxRetries   = 200
)

// The errors that end a run before any verdict: the checker cannot test
// this endpoint as configured. A caller exits 2 on each of them.
var (
	// ErrUnreachable says the endpoint could not be reached at all.
	ErrUnreachable = errors.New("the endpoint cannot be reached")
	// ErrNotAccepted says the endpoint was reached but did not take a
	// plain good payment (at the start, or any more during the run).
	ErrNotAccepted = errors.New("the endpoint does not take a good payment")
	// ErrOracle says an oracle (-count-url, -gateway) did not prove
	// itself on a payment known to have one effect.
	ErrOracle = errors.New("the oracle cannot be trusted")
)

// Profiles.
const (
	ProfileDraft  = "draft"
	ProfileStripe = "stripe"
)

// Validate says what is wrong with the configuration, naming the flag.
func (c Config) Validate() error {
	u, err := url.Parse(c.URL)
	switch {
	case c.URL == "":
		return errors.New("give the endpoint's URL, such as http://127.0.0.1:8080/v1/payments")
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return fmt.Errorf("the URL must start with http:// or https:// and name a host, not %q", c.URL)
	case !strings.Contains(c.Body, "{{id}}"):
		return errors.New("-body must contain {{id}}: each action needs a fresh value, or every case would pay for the same thing")
	case !c.Form && !json.Valid([]byte(strings.ReplaceAll(strings.ReplaceAll(c.Body, "{{id}}", "x"), "{{amount}}", "1"))):
		return errors.New("-body is not JSON once {{id}} and {{amount}} are filled in; use -form for a form body")
	case c.Storm < 2 || c.Storm > maxStorm:
		return fmt.Errorf("-c must be between 2 and %d", maxStorm)
	case c.Timeout <= 0:
		return errors.New("-timeout must be positive")
	case c.Patience < 0:
		return errors.New("-patience must not be negative")
	case c.Rounds < 0 || c.Rounds > maxRounds:
		return fmt.Errorf("-rounds must be between 1 and %d", maxRounds)
	case c.MaxHeaderBytes < 0 || c.MaxBodyBytes < 0:
		return errors.New("-max-header-bytes and -max-body-bytes must be positive")
	case c.VerifyTimeout < 0:
		return errors.New("-verify-timeout must be positive")
	case c.Profile != "" && c.Profile != ProfileDraft && c.Profile != ProfileStripe:
		return fmt.Errorf("-profile must be %q or %q, not %q", ProfileDraft, ProfileStripe, c.Profile)
	case c.OtherPath != "" && !strings.HasPrefix(c.OtherPath, "/"):
		return fmt.Errorf("-other-path must be a path such as /v1/refunds, not %q", c.OtherPath)
	case c.ReplayAfter < 0:
		return errors.New("-replay-after must not be negative")
	case c.CountField != "" && c.CountURL == "":
		return errors.New("-count-field needs -count-url")
	case c.CountURL != "" && !strings.Contains(c.CountURL, "{{id}}"):
		return errors.New("-count-url must contain {{id}}: it lists one action's effects")
	}
	if c.KeyHeader == "" || strings.ContainsAny(c.KeyHeader, " :\t\r\n") {
		return fmt.Errorf("-key-header must be a header name, not %q", c.KeyHeader)
	}
	for _, other := range []struct{ flag, v string }{{"-count-url", c.CountURL}, {"-gateway", c.Gateway}} {
		if other.v == "" {
			continue
		}
		u, err := url.Parse(strings.ReplaceAll(other.v, "{{id}}", "x"))
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("%s must be an http:// or https:// URL, not %q", other.flag, other.v)
		}
	}
	for _, n := range c.Only {
		if n < 1 || n > len(cases) {
			return fmt.Errorf("-cases: there is no case %d (1–%d)", n, len(cases))
		}
	}
	return nil
}

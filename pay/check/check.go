package check

import (
	"context"
	crand "crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
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
}

// DefaultBody is paytwice's own request body.
const DefaultBody = `{"order_id":"{{id}}","amount_satang":{{amount}}}`

// Defaults of the flags.
const (
	DefaultStorm     = 20
	DefaultTimeout   = 10 * time.Second
	DefaultPatience  = time.Minute
	DefaultKeyHeader = "Idempotency-Key"
	// GatewayTokenHeader carries Config.GatewayToken: paytwice's
	// presenter token header.
	GatewayTokenHeader = "X-Presenter-Token"
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

// run is one run's state.
type run struct {
	cfg    Config
	client *http.Client
	tls    *tls.Config
	rng    *rand.Rand
	rngMu  sync.Mutex
	prefix string
	t0     time.Time

	mu      sync.Mutex
	history []Record
	ids     int

	// gatewayUsed says the endpoint charges through -gateway (proved on
	// the first payment); oracle names how effects are counted.
	gatewayUsed bool
	oracle      string
	notes       []string

	// stopErr, once set, ends the run: the endpoint stopped taking good
	// payments. cancel stops what is in flight.
	stopErr error
	cancel  context.CancelFunc

	// Per case: a bound an answer went past, and why an oracle could not
	// count (both turn a verdict into "not decided").
	bound      string
	countErr   string
	effectFail bool

	// policy is what case 11 read of the published policy; reuse is the
	// key case 1 used before waiting -replay-after, for case 19.
	policy *policyInfo
	reuse  *reusedKey
}

// Run runs the cases against cfg.URL and checks the history they make.
// Before any case, the endpoint must take one plain payment and each
// oracle must count exactly its one effect; otherwise the error wraps
// ErrUnreachable, ErrNotAccepted or ErrOracle and says what came back.
// ErrNotAccepted also ends a run whose endpoint stops taking payments
// halfway. Other errors are configuration errors; failures are in the
// report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.KeyHeader == "" {
		cfg.KeyHeader = DefaultKeyHeader
	}
	if cfg.Body == "" {
		cfg.Body = DefaultBody
	}
	if cfg.Storm == 0 {
		cfg.Storm = DefaultStorm
	}
	if cfg.Rounds == 0 {
		cfg.Rounds = DefaultRounds
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Patience == 0 {
		cfg.Patience = DefaultPatience
	}
	if cfg.MaxHeaderBytes == 0 {
		cfg.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.VerifyTimeout == 0 {
		cfg.VerifyTimeout = DefaultVerifyTimeout
	}
	if cfg.Profile == "" {
		cfg.Profile = ProfileDraft
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Wait == nil {
		cfg.Wait = sleep
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := &run{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)), t0: time.Now(), cancel: cancel}
	r.prefix = fmt.Sprintf("chk-%06x", r.rng.Uint32()&0xffffff)
	if cfg.Unguessable {
		r.prefix = "chk-" + hex.EncodeToString(secretBytes(16))
	}
	r.tls = &tls.Config{InsecureSkipVerify: cfg.Insecure, RootCAs: cfg.RootCAs}
	r.client = &http.Client{Timeout: cfg.Timeout, Transport: &http.Transport{
		MaxIdleConnsPerHost: cfg.Storm, DisableCompression: true,
		DialContext:            (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxResponseHeaderBytes: cfg.MaxHeaderBytes,
		TLSClientConfig:        r.tls,
		TLSHandshakeTimeout:    5 * time.Second,
	}}
	defer r.client.CloseIdleConnections()
	if err := r.prove(ctx); err != nil {
		return nil, err
	}

	rep := &Report{Schema: SchemaVersion, URL: cfg.URL, Seed: cfg.Seed, Storm: cfg.Storm, Rounds: cfg.Rounds,
		Profile: cfg.Profile, Oracle: r.oracle, Strict: cfg.Strict}
	for _, c := range cases {
		if len(cfg.Only) > 0 && !containsInt(cfg.Only, c.num) {
			continue
		}
		if err := ctx.Err(); err != nil {
			if r.stopped() != nil {
				return nil, r.stopped()
			}
			return nil, err
		}
		r.bound, r.countErr, r.effectFail = "", "", false
		start := time.Now()
		res := c.run(ctx, r)
		if err := r.stopped(); err != nil {
			return nil, err
		}
		res.Case, res.Name = c.num, c.name
		res.Seconds = time.Since(start).Seconds()
		switch {
		case r.bound != "" && !r.effectFail && res.Verdict != Skip && res.Verdict != Info:
			res = Result{Case: c.num, Name: c.name, Verdict: Skip, Seconds: res.Seconds,
				Detail: "not decided: " + r.bound + " (its verdict would have been " + string(res.Verdict) + ": " + res.Detail + ")"}
		case r.countErr != "" && res.Verdict == Pass && c.counts:
			res.Weak = true
			res.Detail += "; not counted: " + r.countErr
		case res.Verdict == Pass && r.oracle == OracleNone && c.counts:
			res.Weak = true
		}
		rep.Results = append(rep.Results, res)
	}
	rep.Notes = r.notes
	rep.History = r.records()
	checkStart := time.Now()
	lin, err := CheckHistory(rep.History, cfg.VerifyTimeout, "")
	if err != nil {
		return nil, err
	}
	lin.Seconds = time.Since(checkStart).Seconds()
	rep.Linearizability = lin
	rep.sequences()
	rep.Seconds = time.Since(r.t0).Seconds()
	return rep, nil
}

// stop ends the run with err (the first one given wins).
func (r *run) stop(err error) {
	r.mu.Lock()
	if r.stopErr == nil {
		r.stopErr = err
	}
	r.mu.Unlock()
	r.cancel()
}

func (r *run) stopped() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stopErr
}

// Oracle names, as the report gives them.
const (
	OracleGateway  = "gateway"
	OracleCountURL = "count-url"
	OracleNone     = "none"
)

// prove sends one plain payment, which the endpoint must take, and has
// each oracle count its effects: exactly one, or the oracle is not to
// be trusted with any verdict.
func (r *run) prove(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, min(r.cfg.Timeout, probeTimeout))
	defer cancel()
	probe := req{group: "probe", action: r.newID(), noRecord: true, key: r.newKey(), amount: r.newAmount()}
	a := r.send(pctx, probe)
	switch {
	case a.NoAnswer && a.unreached:
		return fmt.Errorf("%w: POST %s: %s", ErrUnreachable, r.cfg.URL, a.Error)
	case a.NoAnswer && a.bound != "":
		return fmt.Errorf("%w: POST %s was reached, but %s", ErrNotAccepted, r.cfg.URL, a.bound)
	case a.NoAnswer:
		return fmt.Errorf("%w: POST %s was reached, but gave no answer to a first good payment: %s", ErrNotAccepted, r.cfg.URL, a.Error)
	case !a.ok():
		return fmt.Errorf("%w: POST %s answered a first good payment (body %s) with %s%s; see -body and -H", ErrNotAccepted, r.cfg.URL, short(a.Body, 120), a, excerpt(a))
	}
	if a.bound != "" {
		r.notes = append(r.notes, fmt.Sprintf("the first payment's answer (%s): %s; cases whose answers do the same are not decided", a, a.bound))
	}
	if r.cfg.Gateway != "" {
		u := r.gatewayCountURL(probe.action)
		n, err := r.countAt(pctx, u, "charges")
		switch {
		case err != nil:
			return fmt.Errorf("%w: -gateway: %v", ErrOracle, err)
		case n == 0:
			r.notes = append(r.notes, fmt.Sprintf("-gateway %s: its books hold no charge for the first payment the endpoint took, so the endpoint does not charge through it: its books and switches are not used", r.cfg.Gateway))
		case n == 1:
			r.gatewayUsed = true
		default:
			return fmt.Errorf("%w: -gateway: its books hold %d charges for one payment, want 1 (GET %s)", ErrOracle, n, u)
		}
	}
	if r.cfg.CountURL != "" {
		u := strings.ReplaceAll(r.cfg.CountURL, "{{id}}", url.QueryEscape(probe.action))
		n, err := r.countAt(pctx, u, r.cfg.CountField)
		switch {
		case err != nil:
			return fmt.Errorf("%w: -count-url: %v", ErrOracle, err)
		case n != 1:
			return fmt.Errorf("%w: -count-url lists %d effects for one payment the endpoint took, want 1 (GET %s, field %q)", ErrOracle, n, u, r.cfg.CountField)
		}
	}
	switch {
	case r.gatewayUsed:
		r.oracle = OracleGateway
	case r.cfg.CountURL != "":
		r.oracle = OracleCountURL
	default:
		r.oracle = OracleNone
	}
	return nil
}

// alive says whether the endpoint still takes a fresh plain payment. A
// run whose endpoint does not is stopped: no verdict it gave after that
// would be about idempotency.
func (r *run) alive(ctx context.Context, why string) bool {
	pctx, cancel := context.WithTimeout(ctx, min(r.cfg.Timeout, probeTimeout))
	defer cancel()
	a := r.send(pctx, req{group: "probe", action: r.newID(), noRecord: true, key: r.newKey(), amount: r.newAmount()})
	if a.ok() || a.bound != "" {
		// An answer past a bound is an answer: whether it took the
		// payment is not known, and its case says so.
		return true
	}
	if ctx.Err() == nil {
		r.stop(fmt.Errorf("%w any more: %s, and a fresh payment with a fresh key was answered %s%s", ErrNotAccepted, why, a, excerpt(a)))
	}
	return false
}

func containsInt(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *run) records() []Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Record(nil), r.history...)
}

func (r *run) record(rec Record) {
	r.mu.Lock()
	r.history = append(r.history, rec)
	r.mu.Unlock()
}

// newID is a fresh action id.
func (r *run) newID() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ids++
	return fmt.Sprintf("%s-%d", r.prefix, r.ids)
}

// newKey is a fresh random key shaped like a UUID v4.
func (r *run) newKey() string {
	r.rngMu.Lock()
	defer r.rngMu.Unlock()
	var b [16]byte
	if r.cfg.Unguessable {
		copy(b[:], secretBytes(len(b)))
	} else {
		for i := range b {
			b[i] = byte(r.rng.Uint32())
		}
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// secretBytes are n bytes from crypto/rand, which never fails.
func secretBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = crand.Read(b)
	return b
}

// keyChars are the characters of a random key: letters, digits and the
// marks every server's key syntax allows.
const keyChars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

// randomKey is a key of n random characters.
func (r *run) randomKey(n int) string {
	r.rngMu.Lock()
	defer r.rngMu.Unlock()
	b := make([]byte, n)
	for i := range b {
		b[i] = keyChars[r.rng.IntN(len(keyChars))]
	}
	return string(b)
}

// otherPathURL is -other-path on the endpoint's origin.
func (r *run) otherPathURL() string {
	origin, _ := urlOrigin(r.cfg.URL)
	return origin + r.cfg.OtherPath
}

// newAmount is a fresh amount.
func (r *run) newAmount() int64 {
	r.rngMu.Lock()
	defer r.rngMu.Unlock()
	return 1000 + r.rng.Int64N(9000)
}

// req is one request a case sends.
type req struct {
	group, action string
	// key is the key's value; header, when set, is sent instead of it
	// (quoted forms, bad keys); noKey sends no key header at all.
	key, header string
	noKey       bool
	amount      int64
	badBody     bool // an invalid body: {{amount}} is not a number
	method      string
	url         string
	other       bool // as the second caller (-other-auth)
	noRecord    bool
	caseNum     int
	// noBody sends no body (a GET); lowerHeader sends the key under the
	// header's name in lower case.
	noBody, lowerHeader bool
	// fingerprintAs, when set, is the fingerprint recorded: the request
	// is the same as another one in other bytes (reordered JSON).
	fingerprintAs string
	// recordKey, when set, is the key the history records: the same key
	// reused once its retention is over is, for the model, another key.
	recordKey string
	// expectContinue asks for "100 Continue" (Expect: 100-continue): a
	// server sends it once it starts reading the body, which tells the
	// checker that the request is in the server's hands.
	expectContinue bool
}

// body fills the template for q.
func (r *run) body(q req) string {
	amount := strconv.FormatInt(q.amount, 10)
	if q.amount == 0 {
		amount = "1000"
	}
	b := strings.ReplaceAll(r.cfg.Body, "{{id}}", q.action)
	if q.badBody {
		if strings.Contains(b, "{{amount}}") {
			return strings.ReplaceAll(b, "{{amount}}", `"not-a-number`)
		}
		return b[:len(b)/2]
	}
	return strings.ReplaceAll(b, "{{amount}}", amount)
}

// newRequest builds q's HTTP request.
func (r *run) newRequest(ctx context.Context, q req) (*http.Request, string, error) {
	method := q.method
	if method == "" {
		method = http.MethodPost
	}
	u := q.url
	if u == "" {
		u = r.cfg.URL
	}
	body := r.body(q)
	var rd io.Reader = strings.NewReader(body)
	if q.noBody {
		body, rd = "", nil
	}
	hr, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, "", err
	}
	for name, vs := range r.cfg.Header {
		for _, v := range vs {
			hr.Header.Add(name, v)
		}
	}
	switch {
	case q.noBody:
	case r.cfg.Form:
		hr.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	default:
		hr.Header.Set("Content-Type", "application/json")
	}
	if q.other {
		hr.Header.Set("Authorization", r.cfg.OtherAuth)
	}
	if q.expectContinue {
		hr.Header.Set("Expect", "100-continue")
	}
	switch {
	case q.noKey:
	case q.lowerHeader:
		// Sent as written: Go writes a header name that is not in its
		// canonical form as it is.
		hr.Header[strings.ToLower(r.cfg.KeyHeader)] = []string{q.key}
	case q.header != "" || q.key == "":
		hr.Header[http.CanonicalHeaderKey(r.cfg.KeyHeader)] = []string{q.header}
	default:
		hr.Header.Set(r.cfg.KeyHeader, q.key)
	}
	return hr, body, nil
}

// recordOf starts q's history record. Its key is the header's value as
// sent: whether a quoted and a bare form are one key is for the server's
// answers to tell (case 6 records them as one when they are).
func (r *run) recordOf(q req, method, u, body string) Record {
	caller := "main"
	if q.other {
		caller = "other"
	}
	key := q.key
	switch {
	case q.noKey:
		key = ""
	case q.header != "":
		key = q.header
	}
	if q.recordKey != "" {
		key = q.recordKey
	}
	fp := fingerprint(method, u, body)
	if q.fingerprintAs != "" {
		fp = q.fingerprintAs
	}
	return Record{Kind: KindRequest, Case: q.caseNum, Group: q.group, Action: q.action, Caller: caller, Key: key,
		Method: method, URL: u, Body: body, Fingerprint: fp}
}

// retryUntilAnswered sends q until it gets an answer that is not 409,
// 429 or 5xx, honouring Retry-After (at most maxRetryWait), for at most
// cfg.Patience and maxRetries tries. It gives up early on an answer the
// server has saved (the same 5xx, byte for byte, three times in a row)
// and on an endpoint that no longer takes any payment, which stops the
// run.
func (r *run) retryUntilAnswered(ctx context.Context, q req) (answer, int) {
	var a, prev answer
	deadline := time.Now().Add(r.cfg.Patience)
	same := 0
	for i := range maxRetries {
		a = r.send(ctx, q)
		if !a.NoAnswer && a.Status != http.StatusConflict && a.Status != http.StatusTooManyRequests && a.Status < 500 {
			return a, i + 1
		}
		if a.Status >= 500 && a.same(prev) {
			same++
		} else {
			same = 0
		}
		prev = a
		if same >= 2 {
			return a, i + 1 // saved: every retry will get it
		}
		if (a.unreached || a.Status >= 500 || (a.NoAnswer && a.bound == "")) && i%3 == 1 {
			if !r.alive(ctx, fmt.Sprintf("a retry of %s with its key was answered %s", q.action, a)) {
				return a, i + 1
			}
		}
		wait, ok := a.retryAfter()
		if !ok {
			wait = min(200*time.Millisecond<<min(i, 5), maxRetryWait)
		}
		wait = min(max(wait, 50*time.Millisecond), maxRetryWait)
		if time.Now().Add(wait).After(deadline) {
			return a, i + 1
		}
		if err := sleep(ctx, wait); err != nil {
			return a, i + 1
		}
	}
	return a, maxRetries
}

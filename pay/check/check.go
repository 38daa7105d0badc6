package check

import (
	"context"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// run is one run's state.
type run struct {
	cfg    Config
	client *http.Client
	// gatewayClient reaches the gateway: client, or Config.GatewayTransport.
	gatewayClient *http.Client
	tls           *tls.Config
	rng           *rand.Rand
	rngMu         sync.Mutex
	prefix        string
	t0            time.Time

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

	// current is the case running, for notice.
	current aCase
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
	if cfg.RetryWait == nil {
		cfg.RetryWait = sleep
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
		DialContext:            r.dial,
		MaxResponseHeaderBytes: cfg.MaxHeaderBytes,
		TLSClientConfig:        r.tls,
		TLSHandshakeTimeout:    5 * time.Second,
	}}
	if cfg.NoRedirects {
		r.client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	}
	defer r.client.CloseIdleConnections()
	r.gatewayClient = r.client
	if cfg.GatewayTransport != nil {
		r.gatewayClient = &http.Client{Timeout: cfg.Timeout, Transport: cfg.GatewayTransport, CheckRedirect: r.client.CheckRedirect}
	}
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
		r.current = c
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
		if cfg.OnResult != nil {
			cfg.OnResult(res)
		}
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

// notice tells Config.OnSafety of a safety failure the running case is
// sure of before it ends; its verdict comes through OnResult all the same.
func (r *run) notice(res Result) {
	if r.cfg.OnSafety != nil {
		res.Case, res.Name = r.current.num, r.current.name
		r.cfg.OnSafety(res)
	}
}

// dial makes a connection to the endpoint: through Config.Dial when set.
func (r *run) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if r.cfg.Dial != nil {
		return r.cfg.Dial(ctx, network, addr)
	}
	return (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
}

// clientFor is the client that reaches u: the gateway's for its URLs.
func (r *run) clientFor(u string) *http.Client {
	if r.cfg.Gateway != "" && strings.HasPrefix(u, strings.TrimRight(r.cfg.Gateway, "/")+"/") {
		return r.gatewayClient
	}
	return r.client
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

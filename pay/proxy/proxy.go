package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"paytwice/pay"
)

// Config says where the proxy forwards, what it injects and how it
// judges.
type Config struct {
	// Target is the API's base URL, such as http://127.0.0.1:8080.
	Target *url.URL
	// Schedule is the faults given to a client's actions in turn; nil
	// means DefaultSchedule.
	Schedule []Fault
	// Random, when above 0, gives each action a fault drawn from
	// Schedule with this probability instead (soak runs), seeded by Seed.
	Random float64
	Seed   uint64
	// Budget is the longest the client says an action may take, waits
	// included; MaxAttempts the most attempts it says it makes. Zero
	// means DefaultBudget and DefaultMaxAttempts.
	Budget      time.Duration
	MaxAttempts int
	// Retention is how long the API keeps a key (its published
	// policy); zero when unknown.
	Retention time.Duration
	// Transport forwards the requests; nil means a transport of its own
	// that keeps connections to the target open.
	Transport http.RoundTripper
	// ForwardTimeout bounds one forwarded request, the API's whole answer
	// included; zero means DefaultForwardTimeout.
	ForwardTimeout time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// ClientOf names the client a request comes from; nil means its
	// remote address (without the port: each attempt may come on a new
	// connection) and its User-Agent.
	ClientOf func(r *http.Request) (id, addr, userAgent string)
	// OnChange, when set, is called after each change to what is
	// recorded, outside any lock; it must not block.
	OnChange func()
}

// Defaults of Config.
const (
	DefaultBudget      = time.Minute
	DefaultMaxAttempts = 10
	// DefaultForwardTimeout: the API's own longest answer (a gateway
	// time-out) is well under it.
	DefaultForwardTimeout = 60 * time.Second
)

// Proxy forwards a client's requests to the API, injecting faults, and
// records and judges what the client does. It is an http.Handler.
type Proxy struct {
	cfg     Config
	started time.Time

	mu      sync.Mutex
	plan    *plan
	clients map[string]*client
	order   []*client
	lookups int
	dropped int // requests forwarded unrecorded: past the bounds
	// forced, when set, is the fault every new action gets instead of
	// the plan's: a presenter choosing the failure that comes next.
	forced Fault
}

// Force makes every new action get fault f, until it is called with ""
// (back to the plan). It refuses a name that is not a fault.
func (p *Proxy) Force(f Fault) error {
	if _, ok := faultInfo[f]; f != "" && !ok {
		return fmt.Errorf("unknown fault %q: use none or %s", f, faultNames())
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.forced = f
	return nil
}

// Forced is the fault Force set, "" when the plan chooses.
func (p *Proxy) Forced() Fault {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.forced
}

// New makes a proxy for cfg.
func New(cfg Config) (*Proxy, error) {
	if cfg.Target == nil || (cfg.Target.Scheme != "http" && cfg.Target.Scheme != "https") || cfg.Target.Host == "" {
		return nil, errors.New("the target must be an http:// or https:// URL with a host")
	}
	if cfg.Budget <= 0 {
		cfg.Budget = DefaultBudget
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = DefaultMaxAttempts
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.ForwardTimeout <= 0 {
		cfg.ForwardTimeout = DefaultForwardTimeout
	}
	if cfg.Transport == nil {
		cfg.Transport = &http.Transport{
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConnsPerHost: 256,
			IdleConnTimeout:     90 * time.Second,
			// The API may be anyone's: its headers are bounded as its body
			// is (forward), and the wait for them by ForwardTimeout.
			MaxResponseHeaderBytes: MaxResponseHeader,
		}
	}
	if cfg.ClientOf == nil {
		cfg.ClientOf = remoteClient
	}
	if len(cfg.Schedule) == 0 {
		cfg.Schedule = DefaultSchedule
	}
	return &Proxy{cfg: cfg, started: cfg.Now(), plan: newPlan(cfg.Schedule, cfg.Random, cfg.Seed), clients: map[string]*client{}}, nil
}

// remoteClient tells clients apart by address and User-Agent.
func remoteClient(r *http.Request) (id, addr, ua string) {
	addr = r.RemoteAddr
	if host, _, err := net.SplitHostPort(addr); err == nil {
		addr = host
	}
	ua = r.Header.Get("User-Agent")
	return addr + " " + ua, addr, ua
}

// ServeHTTP forwards one request, with its action's fault.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxBody+1))
	if err != nil {
		return // the client went away mid-body: nothing to forward
	}
	if len(body) > MaxBody {
		writeProblem(w, r, http.StatusRequestEntityTooLarge, pay.ETOOLARGE, "The body is larger than the proxy reads (64 KiB); it was not forwarded.", 0)
		return
	}
	id, addr, ua := p.cfg.ClientOf(r)
	switch r.Method {
	case http.MethodPost:
	case http.MethodGet, http.MethodHead:
		p.lookup(id)
		p.forwardPlain(w, r, body)
		return
	default:
		p.forwardPlain(w, r, body)
		return
	}
	req := parseRequest(r.Method, r.URL.Path, r.Header, body)
	a, idx, fault := p.begin(id, addr, ua, req, r.Header.Get("Authorization"), r.Header.Get("Cookie"))
	if a == nil { // past the bounds: forwarded, not recorded
		p.forwardPlain(w, r, body)
		return
	}
	p.changed()
	res := p.serveFault(w, r, body, fault)
	p.end(a, idx, res)
	p.changed()
	if res.abort {
		// No connection of its own to drop (HTTP/2, or a test's
		// recorder): abort the stream, which the client sees as no
		// answer either.
		panic(http.ErrAbortHandler)
	}
}

// answer is what came of one attempt.
type answer struct {
	status, apiStatus int
	replayed          bool
	retryAfter        int
	// abort: the connection could not be dropped on its own.
	abort bool
}

// serveFault answers one attempt as its fault says.
func (p *Proxy) serveFault(w http.ResponseWriter, r *http.Request, body []byte, fault Fault) answer {
	switch fault {
	case Refuse, Reset:
		return answer{abort: !hangUp(w, fault == Reset)}
	case Conflict:
		writeProblem(w, r, http.StatusConflict, pay.ECONFLICT, "A request with this key is still running; retry after the Retry-After seconds with the same key.", RetryAfterSeconds)
		return answer{status: http.StatusConflict, retryAfter: RetryAfterSeconds}
	case TooMany:
		writeProblem(w, r, http.StatusTooManyRequests, pay.EBUSY, "Too many requests at once; retry after the Retry-After seconds with the same key.", RetryAfterSeconds)
		return answer{status: http.StatusTooManyRequests, retryAfter: RetryAfterSeconds}
	case Unavailable:
		writeProblem(w, r, http.StatusServiceUnavailable, pay.EUNAVAILABLE, "The service is briefly unavailable; nothing was done. Retry after the Retry-After seconds with the same key.", RetryAfterSeconds)
		return answer{status: http.StatusServiceUnavailable, retryAfter: RetryAfterSeconds}
	case Down, Outage:
		writeProblem(w, r, http.StatusServiceUnavailable, pay.EUNAVAILABLE, "The service is unavailable; nothing was done.", 0)
		return answer{status: http.StatusServiceUnavailable}
	case BadRequest:
		writeProblem(w, r, http.StatusBadRequest, pay.EINVALID, "The request is invalid; sending it again will not change that.", 0)
		return answer{status: http.StatusBadRequest}
	case Unprocessable:
		writeProblem(w, r, http.StatusUnprocessableEntity, pay.EMISMATCH, "This key was used for a different request; sending it again will not change that.", 0)
		return answer{status: http.StatusUnprocessableEntity}
	case Slow:
		t := time.NewTimer(SlowDelay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return answer{}
		}
	}
	resp, respBody, err := p.forward(r, body)
	if err != nil {
		writeProblem(w, r, http.StatusBadGateway, pay.EGATEWAY, "The proxy got no usable answer from the API: "+err.Error(), 0)
		return answer{status: http.StatusBadGateway}
	}
	a := answer{apiStatus: resp.StatusCode, replayed: strings.EqualFold(resp.Header.Get("Idempotent-Replayed"), "true")}
	switch fault {
	case Halfway:
		writeProblem(w, r, http.StatusInternalServerError, pay.EINTERNAL, "The server failed while handling the request; whether it was done is not known. Retry with the same key, or look the order up.", 0)
		return answer{status: http.StatusInternalServerError, apiStatus: resp.StatusCode}
	case Lost:
		return answer{apiStatus: resp.StatusCode, abort: !hangUp(w, false)}
	}
	copyResponse(w, resp, respBody)
	a.status = resp.StatusCode
	if ra, err := strconv.Atoi(strings.TrimSpace(resp.Header.Get("Retry-After"))); err == nil && ra > 0 {
		a.retryAfter = ra
	}
	return a
}

// forwardPlain forwards a request and its answer untouched.
func (p *Proxy) forwardPlain(w http.ResponseWriter, r *http.Request, body []byte) {
	resp, respBody, err := p.forward(r, body)
	if err != nil {
		writeProblem(w, r, http.StatusBadGateway, pay.EGATEWAY, "The proxy got no usable answer from the API: "+err.Error(), 0)
		return
	}
	copyResponse(w, resp, respBody)
}

// Bounds of what the proxy reads of the API's answer: past them it
// answers 502 saying which bound the API went past, and forwards none of
// it.
const (
	MaxResponseBody   = 4 << 20
	MaxResponseHeader = 64 << 10
)

// forward sends the request to the target and reads its whole answer.
func (p *Proxy) forward(r *http.Request, body []byte) (*http.Response, []byte, error) {
	u := *p.cfg.Target
	u.Path = strings.TrimRight(u.Path, "/") + r.URL.Path
	u.RawPath = ""
	u.RawQuery = r.URL.RawQuery
	limit := p.cfg.ForwardTimeout
	ctx, cancel := context.WithTimeout(r.Context(), limit)
	defer cancel()
	out, err := http.NewRequestWithContext(ctx, r.Method, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	for k, vs := range r.Header {
		if !hopByHop[http.CanonicalHeaderKey(k)] {
			out.Header[k] = vs
		}
	}
	out.ContentLength = int64(len(body))
	resp, err := p.cfg.Transport.RoundTrip(out)
	switch {
	case err != nil && strings.Contains(err.Error(), "response headers exceeded"):
		return nil, nil, fmt.Errorf("its answer's headers are larger than the proxy reads (%d KiB)", MaxResponseHeader>>10)
	case err != nil && ctx.Err() == context.DeadlineExceeded:
		return nil, nil, fmt.Errorf("it did not answer within %s", limit)
	case err != nil:
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBody+1))
	switch {
	case err != nil && ctx.Err() == context.DeadlineExceeded:
		return nil, nil, fmt.Errorf("its answer's body did not arrive within %s", limit)
	case err != nil:
		return nil, nil, err
	case len(b) > MaxResponseBody:
		return nil, nil, fmt.Errorf("its answer's body is larger than the proxy reads (%d MiB)", MaxResponseBody>>20)
	}
	return resp, b, nil
}

var hopByHop = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Proxy-Authenticate": true,
	"Proxy-Authorization": true, "Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
	"Content-Length": true,
}

func copyResponse(w http.ResponseWriter, resp *http.Response, body []byte) {
	h := w.Header()
	for k, vs := range resp.Header {
		if !hopByHop[k] {
			h[k] = vs
		}
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(resp.StatusCode)
	w.Write(body)
}

// hangUp ends the connection without an answer: closed, or reset. It
// reports false when the connection cannot be taken over.
func hangUp(w http.ResponseWriter, reset bool) bool {
	hj, ok := w.(http.Hijacker)
	if !ok {
		return false
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		return false
	}
	if tc, ok := conn.(*net.TCPConn); ok && reset {
		tc.SetLinger(0)
	}
	conn.Close()
	return true
}

// stripeCaller reports whether the request comes from one of Stripe's
// SDKs, which read errors in Stripe's shape only.
func stripeCaller(r *http.Request) bool {
	return r.Header.Get("Stripe-Version") != "" || r.Header.Get("X-Stripe-Client-User-Agent") != ""
}

// writeProblem answers as the API does: problem+json, or Stripe's error
// object to a Stripe SDK, with the headers retry libraries read.
func writeProblem(w http.ResponseWriter, r *http.Request, status int, code pay.Code, detail string, retryAfter int) {
	h := w.Header()
	switch {
	case retryAfter > 0:
		h.Set("Retry-After", strconv.Itoa(retryAfter))
		h.Set("Stripe-Should-Retry", "true")
	case status == http.StatusServiceUnavailable:
		h.Set("Stripe-Should-Retry", "true")
	case status >= 400 && status < 500:
		h.Set("Stripe-Should-Retry", "false")
	}
	var body []byte
	if stripeCaller(r) {
		typ := "api_error"
		switch {
		case status == http.StatusConflict:
			typ = "idempotency_error"
		case status < 500:
			typ = "invalid_request_error"
		}
		body, _ = json.Marshal(map[string]any{"error": map[string]string{"type": typ, "code": string(code), "message": detail}})
		h.Set("Content-Type", "application/json")
	} else {
		body, _ = json.Marshal(map[string]any{"type": "/problems/" + string(code), "title": http.StatusText(status), "status": status, "detail": detail, "instance": r.URL.Path})
		h.Set("Content-Type", "application/problem+json")
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	w.Write(body)
}

func (p *Proxy) changed() {
	if p.cfg.OnChange != nil {
		p.cfg.OnChange()
	}
}

// lookup records that a client read the API (a GET): after a 500, it
// may then pay under a new key.
func (p *Proxy) lookup(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lookups++
	if c := p.clients[id]; c != nil {
		c.lastLookup = p.cfg.Now()
	}
}

// begin records a POST's arrival, groups it into an action, applies the
// rules it can break on arrival, and says what fault it gets. It returns
// a nil action past the bounds.
func (p *Proxy) begin(id, addr, ua string, req clientRequest, auth, cookie string) (*Action, int, Fault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.cfg.Now()
	c := p.clients[id]
	if c == nil {
		if len(p.clients) >= maxClients {
			p.dropped++
			return nil, 0, None
		}
		c = &client{id: id, addr: addr, userAgent: ua, byKey: map[string]*Action{}}
		p.clients[id] = c
		p.order = append(p.order, c)
	}
	a, isNew, reused := c.group(req, now, p.cfg.Budget)
	if isNew {
		if len(c.actions) >= maxActionsPerClient {
			p.dropped++
			return nil, 0, None
		}
		c.nextID++
		a = &Action{ID: c.nextID, Method: req.Method, Path: req.Path, Order: req.Order, Started: now, body: req.Body,
			Fault: p.plan.fault(len(c.actions))}
		if p.forced != "" {
			a.Fault = p.forced
		}
		if len(c.actions) > 0 && req.HasKey {
			a.exercise(RuleNoKeyReuse)
		}
		if reused != nil {
			a.broke(RuleNoKeyReuse, 1, "the key %q of action %d (order %q) was sent again for another request", req.Key, reused.ID, reused.Order)
		}
		c.actions = append(c.actions, a)
	}
	a.auth, a.cookie = auth, cookie
	if req.HasKey {
		c.byKey[req.Key] = a
	}
	at := Attempt{Number: len(a.Attempts) + 1, At: now, Key: req.Key, HasKey: req.HasKey, Body: req.Body}
	a.exercise(RuleKeyOnPost)
	if !req.HasKey {
		a.broke(RuleKeyOnPost, at.Number, "attempt %d is a POST without an Idempotency-Key", at.Number)
	}
	if !isNew {
		prev := a.last()
		if prev.Done {
			at.WaitMS = msBetween(prev.Ended, now)
		}
		c.judgeRetry(a, &at, prev, req, p.cfg.Budget, p.cfg.MaxAttempts, p.cfg.Retention)
	}
	switch {
	case a.stopped:
		at.Fault = None
	case a.Fault.meets(at.Number):
		at.Fault = a.Fault
	default:
		at.Fault = None
	}
	a.Attempts = append(a.Attempts, at)
	return a, len(a.Attempts) - 1, at.Fault
}

// end records an attempt's answer.
func (p *Proxy) end(a *Action, idx int, res answer) {
	p.mu.Lock()
	defer p.mu.Unlock()
	at := &a.Attempts[idx]
	at.Status, at.APIStatus, at.Replayed, at.RetryAfter = res.status, res.apiStatus, res.replayed, res.retryAfter
	at.Done, at.Ended = true, p.cfg.Now()
	if idx == len(a.Attempts)-1 {
		a.final = res.status != 0 && finalStatus(res.status, res.replayed)
	}
	if res.status >= 400 && res.status < 500 && !retryableStatus(res.status) {
		a.exercise(RuleNo4xxRetry)
	}
	if res.retryAfter > 0 {
		a.exercise(RuleRetryAfter)
	}
	if res.status == 0 || retryableStatus(res.status) {
		a.exercise(RuleBudget)
	}
}

// String names a fault.
func (f Fault) String() string { return string(f) }

var _ fmt.Stringer = Fault("")

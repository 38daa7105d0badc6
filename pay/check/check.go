package check

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
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
	// Storm is how many requests share one key in case 4.
	Storm int
	// Seed makes the keys and ids, and so a run, repeatable.
	Seed uint64
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
}

// DefaultBody is paytwice's own request body.
const DefaultBody = `{"order_id":"{{id}}","amount_satang":{{amount}}}`

// Defaults of the flags.
const (
	DefaultStorm     = 20
	DefaultTimeout   = 10 * time.Second
	DefaultPatience  = time.Minute
	DefaultKeyHeader = "Idempotency-Key"
	maxStorm         = 500
	maxRetryWait     = 5 * time.Second // the longest Retry-After honoured
	maxRetries       = 200
)

// ErrUnreachable says the endpoint could not be reached at all.
var ErrUnreachable = errors.New("the endpoint cannot be reached")

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
	rng    *rand.Rand
	rngMu  sync.Mutex
	prefix string
	t0     time.Time

	mu      sync.Mutex
	history []Record
	ids     int

	// gatewayUsed says the endpoint charges through -gateway (learnt in
	// case 1); oracle names how effects are counted.
	gatewayUsed bool
	oracle      string
}

// Run runs the cases against cfg.URL and checks the history they make.
// Its error is ErrUnreachable (wrapped) when the endpoint cannot be
// reached, or a configuration error; failures are in the report.
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
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Patience == 0 {
		cfg.Patience = DefaultPatience
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Wait == nil {
		cfg.Wait = sleep
	}
	r := &run{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)), t0: time.Now()}
	r.prefix = fmt.Sprintf("chk-%06x", r.rng.Uint32()&0xffffff)
	r.client = &http.Client{Timeout: cfg.Timeout, Transport: &http.Transport{
		MaxIdleConnsPerHost: cfg.Storm, DisableCompression: true,
		DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
	}}
	defer r.client.CloseIdleConnections()
	// Reachable at all? An answer of any status will do.
	probe := req{group: "probe", action: r.newID(), noRecord: true, key: r.newKey()}
	if a := r.send(ctx, probe); a.NoAnswer {
		return nil, fmt.Errorf("%w: POST %s: %s", ErrUnreachable, cfg.URL, a.Error)
	}
	// Does the endpoint charge through -gateway? Only then do its books
	// count, and its switches reach the endpoint's payments.
	if cfg.Gateway != "" {
		n, err := r.countAt(ctx, strings.TrimRight(cfg.Gateway, "/")+"/charges?order_id="+url.QueryEscape(probe.action), "charges")
		r.gatewayUsed = err == nil && n > 0
	}
	switch {
	case r.gatewayUsed:
		r.oracle = "the gateway's books"
	case cfg.CountURL != "":
		r.oracle = "-count-url"
	}

	rep := &Report{URL: cfg.URL, Seed: cfg.Seed, Storm: cfg.Storm, Oracle: r.oracle}
	for _, c := range cases {
		if len(cfg.Only) > 0 && !containsInt(cfg.Only, c.num) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		start := time.Now()
		res := c.run(ctx, r)
		res.Case, res.Name = c.num, c.name
		res.Seconds = time.Since(start).Seconds()
		if res.Verdict == Pass && r.oracle == "" && c.counts {
			res.Weak = true
		}
		rep.Results = append(rep.Results, res)
	}
	rep.History = r.records()
	lin, err := CheckHistory(rep.History, 30*time.Second, "")
	if err != nil {
		return nil, err
	}
	rep.Linearizability = lin
	rep.Seconds = time.Since(r.t0).Seconds()
	return rep, nil
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
	for i := range b {
		b[i] = byte(r.rng.Uint32())
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
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
	hr, err := http.NewRequestWithContext(ctx, method, u, strings.NewReader(body))
	if err != nil {
		return nil, "", err
	}
	for name, vs := range r.cfg.Header {
		for _, v := range vs {
			hr.Header.Add(name, v)
		}
	}
	if r.cfg.Form {
		hr.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	} else {
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
	case q.header != "" || q.key == "":
		hr.Header[http.CanonicalHeaderKey(r.cfg.KeyHeader)] = []string{q.header}
	default:
		hr.Header.Set(r.cfg.KeyHeader, q.key)
	}
	return hr, body, nil
}

// recordOf starts q's history record.
func (r *run) recordOf(q req, method, u, body string) Record {
	caller := "main"
	if q.other {
		caller = "other"
	}
	key := q.key
	if q.noKey {
		key = ""
	}
	return Record{Kind: KindRequest, Case: q.caseNum, Group: q.group, Action: q.action, Caller: caller, Key: key,
		Method: method, URL: u, Body: body, Fingerprint: fingerprint(method, u, body)}
}

// answer is one request's outcome.
type answer struct {
	Record
	Header http.Header
}

// ok says the request was answered with a 2xx.
func (a answer) ok() bool { return !a.NoAnswer && a.Status >= 200 && a.Status < 300 }

// same says a and b are the same answer: status and bytes.
func (a answer) same(b answer) bool {
	return !a.NoAnswer && !b.NoAnswer && a.Status == b.Status && a.Response == b.Response
}

func (a answer) String() string {
	if a.NoAnswer {
		return "no answer (" + a.Error + ")"
	}
	return fmt.Sprintf("%d %s", a.Status, http.StatusText(a.Status))
}

// retryAfter is the answer's Retry-After, if it has one in seconds.
func (a answer) retryAfter() (time.Duration, bool) {
	v := a.Header.Get("Retry-After")
	if v == "" {
		return 0, false
	}
	if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n >= 0 {
		return time.Duration(n) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(0, time.Until(t)), true
	}
	return 0, false
}

const maxResponse = 1 << 20

// send sends q and records it.
func (r *run) send(ctx context.Context, q req) answer {
	hr, body, err := r.newRequest(ctx, q)
	rec := r.recordOf(q, orDefault(q.method, http.MethodPost), orDefault(q.url, r.cfg.URL), body)
	rec.Start = time.Now()
	if err != nil {
		rec.End, rec.NoAnswer, rec.Error = time.Now(), true, err.Error()
		return answer{Record: rec}
	}
	res, err := r.client.Do(hr)
	a := finish(rec, res, err)
	if !q.noRecord {
		r.record(a.Record)
	}
	return a
}

func shortErr(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return err.Error()
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// rawConn is a request written by hand on a connection of its own, so
// that the checker chooses when its last byte leaves and whether its
// answer is read at all.
type rawConn struct {
	conn net.Conn
	in   *bufio.Reader
	rest []byte // the bytes not yet sent
	rec  Record
	// deadline ends the whole exchange (-timeout).
	deadline time.Time
}

// dialRaw opens a connection for q and sends all of it but the last byte.
func (r *run) dialRaw(ctx context.Context, q req) (*rawConn, error) {
	hr, body, err := r.newRequest(ctx, q)
	if err != nil {
		return nil, err
	}
	hr.Close = true
	var buf bytes.Buffer
	if err := hr.Write(&buf); err != nil {
		return nil, err
	}
	host := hr.URL.Host
	if hr.URL.Port() == "" {
		if hr.URL.Scheme == "https" {
			host += ":443"
		} else {
			host += ":80"
		}
	}
	d := net.Dialer{Timeout: 5 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return nil, err
	}
	if hr.URL.Scheme == "https" {
		tc := tls.Client(conn, &tls.Config{ServerName: hr.URL.Hostname(), NextProtos: []string{"http/1.1"}})
		if err := tc.HandshakeContext(ctx); err != nil {
			conn.Close()
			return nil, err
		}
		conn = tc
	}
	data := buf.Bytes()
	deadline := time.Now().Add(r.cfg.Timeout)
	_ = conn.SetDeadline(deadline)
	if _, err := conn.Write(data[:len(data)-1]); err != nil {
		conn.Close()
		return nil, err
	}
	rec := r.recordOf(q, hr.Method, hr.URL.String(), body)
	return &rawConn{conn: conn, in: bufio.NewReader(conn), rest: data[len(data)-1:], rec: rec, deadline: deadline}, nil
}

// release sends the last byte: the server now has the whole request.
func (c *rawConn) release() error {
	c.rec.Start = time.Now()
	_, err := c.conn.Write(c.rest)
	return err
}

// maxInterim bounds the interim (1xx) answers read before the final one.
const maxInterim = 10

// read reads the answer, past any interim 1xx, and closes the connection.
func (c *rawConn) read(req *http.Request) answer {
	defer c.conn.Close()
	res, err := http.ReadResponse(c.in, req)
	for i := 0; err == nil && isInterim(res.StatusCode) && i < maxInterim; i++ {
		res, err = http.ReadResponse(c.in, req)
	}
	return finish(c.rec, res, err)
}

func isInterim(status int) bool {
	return status >= 100 && status < 200 && status != http.StatusSwitchingProtocols
}

// awaitContinue waits, for at most limit, for the server's "100
// Continue" to a request sent with Expect: 100-continue. It reads no
// further than the first status line; a final answer instead is left
// for read.
func (c *rawConn) awaitContinue(limit time.Duration) bool {
	_ = c.conn.SetReadDeadline(time.Now().Add(limit))
	defer c.conn.SetReadDeadline(c.deadline)
	line, err := c.in.Peek(len("HTTP/1.1 100 "))
	if err != nil || !bytes.HasPrefix(line, []byte("HTTP/1.")) || !bytes.HasSuffix(line, []byte(" 100 ")) {
		return false
	}
	res, err := http.ReadResponse(c.in, &http.Request{Method: http.MethodPost})
	return err == nil && res.StatusCode == http.StatusContinue
}

// finish reads res (or takes err) into rec's answer, ending it now.
func finish(rec Record, res *http.Response, err error) answer {
	a := answer{Record: rec}
	if err == nil {
		var b []byte
		b, err = io.ReadAll(io.LimitReader(res.Body, maxResponse))
		res.Body.Close()
		a.Status, a.Response, a.Header = res.StatusCode, string(b), res.Header
	}
	a.End = time.Now()
	if err != nil {
		a.NoAnswer, a.Error, a.Status, a.Response = true, shortErr(err), 0, ""
	}
	return a
}

// hangUp closes the connection without reading the answer: the request
// happened, its answer is lost.
func (c *rawConn) hangUp() answer {
	c.conn.Close()
	a := answer{Record: c.rec}
	a.End = time.Now()
	a.NoAnswer, a.Error = true, "hung up before reading the answer"
	return a
}

// effects counts action's effects through the oracle; ok is false
// without one (or when it could not be read, said in note).
func (r *run) effects(ctx context.Context, group, action string) (n int, ok bool, note string) {
	var u, field string
	switch {
	case r.cfg.Gateway != "" && r.gatewayUsed:
		u, field = strings.TrimRight(r.cfg.Gateway, "/")+"/charges?order_id="+url.QueryEscape(action), "charges"
	case r.cfg.CountURL != "":
		u, field = strings.ReplaceAll(r.cfg.CountURL, "{{id}}", url.QueryEscape(action)), r.cfg.CountField
	default:
		return 0, false, ""
	}
	start := time.Now()
	n, err := r.countAt(ctx, u, field)
	if err != nil {
		return 0, false, "the effects could not be counted: " + err.Error()
	}
	end := time.Now()
	r.record(Record{Kind: KindCount, Group: group, Action: action, URL: u, Start: start, End: end, Count: n})
	return n, true, ""
}

// countAt GETs u and counts the array in field.
func (r *run) countAt(ctx context.Context, u, field string) (int, error) {
	hr, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	for name, vs := range r.cfg.Header {
		if strings.EqualFold(name, r.cfg.KeyHeader) || strings.EqualFold(name, "Content-Type") {
			continue
		}
		for _, v := range vs {
			hr.Header.Add(name, v)
		}
	}
	res, err := r.client.Do(hr)
	if err != nil {
		return 0, errors.New(shortErr(err))
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 16<<20))
	if err != nil {
		return 0, err
	}
	if res.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s answered %d", u, res.StatusCode)
	}
	raw := json.RawMessage(b)
	if field != "" {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(b, &obj); err != nil {
			return 0, fmt.Errorf("GET %s: not a JSON object: %v", u, err)
		}
		var ok bool
		if raw, ok = obj[field]; !ok {
			return 0, fmt.Errorf("GET %s: no field %q", u, field)
		}
	}
	var arr []json.RawMessage
	if string(raw) == "null" {
		return 0, nil
	}
	if err := json.Unmarshal(raw, &arr); err != nil {
		return 0, fmt.Errorf("GET %s: %q is not an array", u, field)
	}
	return len(arr), nil
}

// gatewaySwitches sets the gateway's switches.
func (r *run) gatewaySwitches(ctx context.Context, sw map[string]any) error {
	b, _ := json.Marshal(sw)
	hr, err := http.NewRequestWithContext(ctx, http.MethodPut, strings.TrimRight(r.cfg.Gateway, "/")+"/switches", bytes.NewReader(b))
	if err != nil {
		return err
	}
	hr.Header.Set("Content-Type", "application/json")
	res, err := r.client.Do(hr)
	if err != nil {
		return errors.New(shortErr(err))
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, res.Body)
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("PUT %s/switches answered %d", r.cfg.Gateway, res.StatusCode)
	}
	return nil
}

// gatewayPending is how many of action's charges wait out their latency
// at the gateway.
func (r *run) gatewayPending(ctx context.Context, action string) (int, error) {
	hr, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(r.cfg.Gateway, "/")+"/charges?order_id="+url.QueryEscape(action), nil)
	if err != nil {
		return 0, err
	}
	res, err := r.client.Do(hr)
	if err != nil {
		return 0, errors.New(shortErr(err))
	}
	defer res.Body.Close()
	var body struct {
		Pending int `json:"pending"`
	}
	if err := json.NewDecoder(res.Body).Decode(&body); err != nil {
		return 0, err
	}
	return body.Pending, nil
}

// waitPending waits, polling, until action has a charge in flight at the
// gateway, for at most limit.
func (r *run) waitPending(ctx context.Context, action string, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if n, err := r.gatewayPending(ctx, action); err == nil && n > 0 {
			return true
		}
		if sleep(ctx, 10*time.Millisecond) != nil {
			return false
		}
	}
	return false
}

// waitCharged waits, polling, until the gateway's books hold a charge for
// action, for at most limit.
func (r *run) waitCharged(ctx context.Context, action string, limit time.Duration) bool {
	u := strings.TrimRight(r.cfg.Gateway, "/") + "/charges?order_id=" + url.QueryEscape(action)
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if n, err := r.countAt(ctx, u, "charges"); err == nil && n > 0 {
			return true
		}
		if sleep(ctx, 10*time.Millisecond) != nil {
			return false
		}
	}
	return false
}

// retryUntilAnswered sends q until it gets an answer that is not 409,
// 429 or 5xx, honouring Retry-After (at most maxRetryWait), for at most
// cfg.Patience and maxRetries tries.
func (r *run) retryUntilAnswered(ctx context.Context, q req) (answer, int) {
	var a answer
	deadline := time.Now().Add(r.cfg.Patience)
	for i := range maxRetries {
		a = r.send(ctx, q)
		if !a.NoAnswer && a.Status != http.StatusConflict && a.Status != http.StatusTooManyRequests && a.Status < 500 {
			return a, i + 1
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

package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"paytwice/pay/check"
)

// runBench is "paytwice bench": a load generator for any idempotent
// payments endpoint, this one or the reader's own. It runs in a process of
// its own, so what it measures is what a client sees over the network,
// and with -pid it also reads how much CPU the server spent.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("bench", "Sends payments to an idempotent endpoint and prints throughput, latency and status counts.\n\n"+
		"  -mode new     every request has a key of its own: each one is a new payment\n"+
		"  -mode replay  pays -keys keys first (not timed), then sends them again: every answer is a saved one\n"+
		"  -mode storm   -c requests with one key, all at once, -n times: exactly one should be a fresh 201\n\n"+
		"In -body, {key} is replaced by the request's idempotency key and {n} by its number.", stdout, stderr)
	baseURL := fs.String("url", "http://127.0.0.1:8080", "the server")
	path := fs.String("path", "/v1/payments", "the idempotent endpoint (POST)")
	mode := fs.String("mode", "new", "new, replay or storm")
	clients := fs.Int("c", 16, "concurrent clients (in storm mode: requests per storm)")
	count := fs.Int("n", 0, "requests to time (default 10000; in storm mode the number of storms, default 1)")
	duration := fs.Duration("d", 0, "run for this long instead of -n requests (new and replay modes)")
	keys := fs.Int("keys", 1000, "replay mode: how many keys to pay before replaying them")
	body := fs.String("body", `{"order_id":"{key}","amount_satang":1000}`, "request body")
	auth := fs.String("auth", "", `Authorization header, e.g. "Bearer alice" (default: none)`)
	callers := fs.Int("callers", 0, "send as this many distinct callers, as a class's phones are (Authorization: Bearer <run>-caller-<i>; each key always from one of them); default: one caller, the -auth one or the anonymous one")
	presenterToken := fs.String("presenter-token", "", "the presenter token of a class server (paytwice serve -presenter-token): sent as X-Presenter-Token, so the load is not held to a student's share of the payments at work")
	unquoted := fs.Bool("unquoted", false, "send the key bare, as Stripe does, instead of as a quoted structured-field string")
	timeout := fs.Duration("timeout", 30*time.Second, "time-out of each request")
	pid := fs.Int("pid", 0, "the server's process id: also report its CPU time per request (Linux)")
	rate := fs.Float64("rate", 0, "new and replay modes: send at most this many requests a second, evenly spaced (default: as fast as the clients go)")
	watch := fs.Int("viewers", 0, "keep this many live pages (GET /events) open during the run, and report how long a payment's 201 took to reach them")
	if help, err := fs.parse(args); help || err != nil {
		return err
	}
	b := bench{
		url:      strings.TrimRight(*baseURL, "/") + *path,
		unquoted: *unquoted, timeout: *timeout, clients: *clients, pid: *pid, rate: *rate,
		prefix: "bench-" + randomHex(4) + "-",
	}
	n := *count
	switch {
	case !strings.HasPrefix(*baseURL, "http://") && !strings.HasPrefix(*baseURL, "https://"):
		return badValue("-url must start with http:// or https://, not %q", *baseURL)
	case !strings.HasPrefix(*path, "/"):
		return badValue("-path must start with /, not %q", *path)
	case *mode != "new" && *mode != "replay" && *mode != "storm":
		return badValue("-mode must be new, replay or storm, not %q", *mode)
	case *clients < 1 || *clients > 10000:
		return badValue("-c must be between 1 and 10000")
	case n < 0:
		return badValue("-n must not be negative")
	case *duration < 0:
		return badValue("-d must not be negative")
	case *duration > 0 && *count > 0:
		return badValue("give -n or -d, not both")
	case *duration > 0 && *mode == "storm":
		return badValue("-d does not apply to storms: give the number of storms with -n")
	case *keys < 1 || *keys > 1_000_000:
		return badValue("-keys must be between 1 and 1000000")
	case strings.ContainsAny(*auth, "\r\n"):
		return badValue("-auth must be one line")
	case *callers < 0 || *callers > 100_000:
		return badValue("-callers must be between 0 (one caller) and 100000")
	case *callers > 0 && *auth != "":
		return badValue("give -auth or -callers, not both")
	case strings.ContainsAny(*presenterToken, "\r\n"):
		return badValue("-presenter-token must be one line")
	case *timeout <= 0:
		return badValue("-timeout must be positive")
	case *pid < 0:
		return badValue("-pid must be a process id")
	case *rate < 0 || *rate > 1e6:
		return badValue("-rate must be between 0 (no limit) and 1000000")
	case *rate > 0 && *mode == "storm":
		return badValue("-rate does not apply to storms")
	case *watch < 0 || *watch > 10000:
		return badValue("-viewers must be between 0 and 10000")
	}
	if n == 0 && *duration == 0 {
		n = 10000
		if *mode == "storm" {
			n = 1
		}
	}
	var extra []string
	if *presenterToken != "" {
		extra = append(extra, check.PresenterHeader+": "+*presenterToken)
	}
	tmpl, err := newRequestTemplate(b.url, *body, *auth, extra...)
	if err != nil {
		return badValue("-url: %v", err)
	}
	if *callers > 0 {
		tmpl.withCallers(*callers, b.prefix)
	}
	b.tmpl = tmpl
	defer b.closeConns()
	if *pid > 0 {
		if _, err := processCPU(*pid); err != nil {
			return fmt.Errorf("-pid %d: %w", *pid, err)
		}
	}

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt)
	defer stop()
	if *watch > 0 {
		v, err := openViewers(ctx, baseOf(b.url, *path), b.prefix, *watch, *callers)
		if err != nil {
			return fmt.Errorf("opening %d viewers: %w", *watch, err)
		}
		b.viewers = v
		defer v.close()
	}
	if *callers > 0 {
		fmt.Fprintf(stdout, "callers: %d (Bearer %scaller-0 to -%d), each key always from one of them\n", *callers, b.prefix, *callers-1)
	}
	var res benchResult
	switch *mode {
	case "new":
		fmt.Fprintf(stdout, "new payments: %d clients, %s to POST %s\n", *clients, amount(n, *duration), b.url)
		res, err = b.run(ctx, n, *duration, func(i int) string { return b.prefix + strconv.Itoa(i) })
	case "replay":
		fmt.Fprintf(stdout, "replays: %d keys paid first, then %d clients, %s to POST %s\n", *keys, *clients, amount(n, *duration), b.url)
		if err := b.prepare(ctx, *keys); err != nil {
			return err
		}
		res, err = b.run(ctx, n, *duration, func(i int) string { return b.prefix + strconv.Itoa(i%*keys) })
	case "storm":
		fmt.Fprintf(stdout, "storms: %d × %d requests at once with one key each, to POST %s\n", n, *clients, b.url)
		res, err = b.storms(ctx, n)
	}
	if err != nil {
		return err
	}
	res.print(stdout)
	if b.viewers != nil {
		// The last payments' frames are still on their way: give them the
		// longest coalescing interval and a margin.
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
		}
		b.viewers.print(stdout, *watch)
	}
	return res.verdict()
}

// bench is one run's settings.
type bench struct {
	url, prefix  string
	tmpl         *requestTemplate
	unquoted     bool
	timeout      time.Duration // of each request
	clients, pid int
	rate         float64      // requests a second, 0 for no limit
	conns        []*benchConn // one per client, kept from one phase to the next
	viewers      *viewers     // open during the run, or nil
}

// benchResult is what a run measured.
type benchResult struct {
	requests  int
	elapsed   time.Duration
	latencies []time.Duration
	statuses  map[int]int
	replayed  int // answers marked Idempotent-Replayed: true
	errors    int
	firstErr  error
	serverCPU time.Duration // -1 when not measured
	// serverWrites is the server's write system calls (to sockets and
	// files alike) over the run; -1 when not measured.
	serverWrites int64

	// storms only
	storms      int
	fresh       []int           // per storm: 2xx answers not marked replayed
	bodies      []int           // per storm: distinct 2xx bodies
	stormWall   []time.Duration // per storm: until its last answer
	stormClient int
}

func amount(n int, d time.Duration) string {
	if d > 0 {
		return "for " + d.String()
	}
	return strconv.Itoa(n) + " requests"
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// answer is one request's outcome.
type answer struct {
	status   int
	replayed bool
	body     string // kept only when asked for
	latency  time.Duration
	done     time.Time // when the answer had been read
	err      error
}

// warm gives each of the first n clients its connection before the
// clock starts, so that the run measures payments rather than TCP
// handshakes. A client that cannot connect now tries again, and reports
// the error, when it sends.
func (b *bench) warm(ctx context.Context, n int) []*benchConn {
	for len(b.conns) < n {
		b.conns = append(b.conns, &benchConn{t: b.tmpl, unquoted: b.unquoted, timeout: b.timeout})
	}
	conns := b.conns[:n]
	var wg sync.WaitGroup
	for _, c := range conns {
		if c.conn == nil {
			wg.Go(func() { _ = c.dial(ctx) })
		}
	}
	wg.Wait()
	return conns
}

func (b *bench) closeConns() {
	for _, c := range b.conns {
		c.close()
	}
}

// prepare pays keys 0..n-1 for replay mode.
func (b *bench) prepare(ctx context.Context, n int) error {
	res, err := b.run(ctx, n, 0, func(i int) string { return b.prefix + strconv.Itoa(i) })
	if err != nil {
		return err
	}
	if res.errors > 0 || res.statuses[http.StatusCreated]+res.statuses[http.StatusOK] != n {
		return fmt.Errorf("paying the %d keys to replay: %s", n, res.statusLine())
	}
	return nil
}

// run sends n requests (or, with d > 0, as many as fit in d) from
// b.clients goroutines; key names request i's key.
func (b *bench) run(ctx context.Context, n int, d time.Duration, key func(i int) string) (benchResult, error) {
	conns := b.warm(ctx, b.clients)
	limit := n
	if d > 0 {
		limit = 1 << 30
	}
	var next atomic.Int64
	parts := make([]benchResult, b.clients)
	cpu0, _ := processCPU(b.pid)
	writes0 := processWrites(b.pid)
	start := time.Now()
	var deadline time.Time
	if d > 0 {
		deadline = start.Add(d)
	}
	var wg sync.WaitGroup
	for w := range parts {
		part, c := &parts[w], conns[w]
		part.statuses = map[int]int{}
		part.latencies = make([]time.Duration, 0, 1024)
		wg.Go(func() {
			// No request starts after the deadline; those in flight
			// then are read and counted, which adds at most one
			// request's time to the run and one request per client
			// to its count.
			now := start
			for ctx.Err() == nil && (deadline.IsZero() || now.Before(deadline)) {
				i := int(next.Add(1)) - 1
				if i >= limit {
					return
				}
				if b.rate > 0 {
					at := start.Add(time.Duration(float64(i) / b.rate * float64(time.Second)))
					if !deadline.IsZero() && at.After(deadline) {
						return
					}
					if !sleepUntil(ctx, at) {
						return
					}
				}
				k := key(i)
				a := c.send(ctx, k, i, false)
				now = a.done
				if b.viewers != nil && a.err == nil && a.status == http.StatusCreated {
					b.viewers.paidAt(k, now)
				}
				part.add(a)
			}
		})
	}
	wg.Wait()
	res := merge(parts)
	res.elapsed = time.Since(start)
	res.serverCPU = b.cpuSince(cpu0)
	res.serverWrites = -1
	if w := processWrites(b.pid); w >= 0 && writes0 >= 0 {
		res.serverWrites = w - writes0
	}
	return res, ctx.Err()
}

// sleepUntil waits until t, or returns false when ctx ends first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// storms sends n storms one after the other: each is b.clients requests
// with one new key, released together.
func (b *bench) storms(ctx context.Context, n int) (benchResult, error) {
	conns := b.warm(ctx, b.clients)
	total := benchResult{statuses: map[int]int{}, stormClient: b.clients, serverCPU: -1, serverWrites: -1}
	cpu0, _ := processCPU(b.pid)
	var cpu time.Duration
	for s := range n {
		key := b.prefix + "storm-" + strconv.Itoa(s)
		answers := make([]answer, b.clients)
		release := make(chan struct{})
		var ready, wg sync.WaitGroup
		for i, c := range conns {
			ready.Add(1)
			wg.Go(func() {
				ready.Done()
				<-release
				answers[i] = c.send(ctx, key, s, true)
			})
		}
		ready.Wait()
		t0 := time.Now()
		close(release)
		wg.Wait()
		wall := time.Since(t0)
		total.elapsed += wall
		fresh, bodies := 0, map[string]bool{}
		for _, a := range answers {
			total.add(a)
			if a.err == nil && a.status >= 200 && a.status < 300 {
				bodies[a.body] = true
				if !a.replayed {
					fresh++
				}
			}
		}
		total.storms++
		total.fresh = append(total.fresh, fresh)
		total.bodies = append(total.bodies, len(bodies))
		total.stormWall = append(total.stormWall, wall)
		if ctx.Err() != nil {
			return total, ctx.Err()
		}
		// The gaps between storms are not the server's work either way;
		// the CPU figure covers the whole run.
		cpu = b.cpuSince(cpu0)
	}
	total.serverCPU = cpu
	return total, nil
}

func (r *benchResult) add(a answer) {
	r.requests++
	r.latencies = append(r.latencies, a.latency)
	if a.err != nil {
		r.errors++
		if r.firstErr == nil {
			r.firstErr = a.err
		}
		return
	}
	r.statuses[a.status]++
	if a.replayed {
		r.replayed++
	}
}

func merge(parts []benchResult) benchResult {
	out := benchResult{statuses: map[int]int{}, serverCPU: -1, serverWrites: -1}
	for _, p := range parts {
		out.requests += p.requests
		out.latencies = append(out.latencies, p.latencies...)
		for s, c := range p.statuses {
			out.statuses[s] += c
		}
		out.replayed += p.replayed
		out.errors += p.errors
		if out.firstErr == nil {
			out.firstErr = p.firstErr
		}
	}
	return out
}

// cpuSince is the server's CPU time since cpu0, or -1 without -pid.
func (b *bench) cpuSince(cpu0 time.Duration) time.Duration {
	if b.pid == 0 {
		return -1
	}
	cpu, err := processCPU(b.pid)
	if err != nil {
		return -1
	}
	return cpu - cpu0
}

// processCPU reads a process's user+system CPU time from /proc/PID/stat.
// The kernel counts it in clock ticks of 10 ms (USER_HZ is 100 on every
// Linux architecture Go supports), so a run should last a few seconds.
func processCPU(pid int) (time.Duration, error) {
	if pid == 0 {
		return 0, nil
	}
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name, in brackets, may hold spaces: count fields after it.
	s := string(raw)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, nil
}

// processWrites reads how many write system calls a process has made
// (syscw in /proc/PID/io: write and its kin, to sockets and files), or -1
// when it cannot. Unlike its CPU time, the count does not move with the
// machine's load: with live pages open it is mostly the pages' writes,
// which is what they cost.
func processWrites(pid int) int64 {
	if pid == 0 {
		return -1
	}
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/io")
	if err != nil {
		return -1
	}
	for line := range strings.Lines(string(raw)) {
		if v, ok := strings.CutPrefix(line, "syscw:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return -1
			}
			return n
		}
	}
	return -1
}

func (r benchResult) percentile(p float64) time.Duration {
	if len(r.latencies) == 0 {
		return 0
	}
	i := int(p * float64(len(r.latencies)-1))
	return r.latencies[i]
}

func (r benchResult) statusLine() string {
	codes := make([]int, 0, len(r.statuses))
	for c := range r.statuses {
		codes = append(codes, c)
	}
	sort.Ints(codes)
	var parts []string
	for _, c := range codes {
		parts = append(parts, fmt.Sprintf("%d ×%d", c, r.statuses[c]))
	}
	if r.replayed > 0 {
		parts = append(parts, fmt.Sprintf("(%d marked Idempotent-Replayed)", r.replayed))
	}
	if r.errors > 0 {
		parts = append(parts, fmt.Sprintf("no answer ×%d (first: %v)", r.errors, r.firstErr))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func ms(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 2, 64) + " ms" }

func (r benchResult) print(w io.Writer) {
	slices.Sort(r.latencies)
	fmt.Fprintf(w, "requests    %d in %.2f s\n", r.requests, r.elapsed.Seconds())
	if r.elapsed > 0 && r.storms == 0 {
		fmt.Fprintf(w, "throughput  %.0f requests/s\n", float64(r.requests)/r.elapsed.Seconds())
	}
	fmt.Fprintf(w, "latency     p50 %s  p99 %s  max %s\n", ms(r.percentile(0.50)), ms(r.percentile(0.99)), ms(r.percentile(1)))
	fmt.Fprintf(w, "statuses    %s\n", r.statusLine())
	if r.storms > 0 {
		worst := slices.Max(r.stormWall)
		fmt.Fprintf(w, "storms      %d of %d requests each; the slowest was fully answered in %s\n", r.storms, r.stormClient, ms(worst))
		fmt.Fprintf(w, "fresh 201s  %s per storm (one is right)\n", spread(r.fresh))
		fmt.Fprintf(w, "2xx bodies  %s distinct per storm (one is right: every success answers the same charge)\n", spread(r.bodies))
	}
	if r.serverCPU >= 0 && r.requests > 0 {
		fmt.Fprintf(w, "server CPU  %.2f s, %s per request (user+system, 10 ms ticks)\n",
			r.serverCPU.Seconds(), ms(r.serverCPU/time.Duration(r.requests)))
	}
	if r.serverWrites >= 0 && r.requests > 0 {
		fmt.Fprintf(w, "server writes %d write calls, %.1f per request (sockets and files, /proc/PID/io)\n",
			r.serverWrites, float64(r.serverWrites)/float64(r.requests))
	}
}

// spread shows per-storm counts as one number when they agree, min–max
// otherwise.
func spread(xs []int) string {
	lo, hi := slices.Min(xs), slices.Max(xs)
	if lo == hi {
		return strconv.Itoa(lo)
	}
	return fmt.Sprintf("%d–%d", lo, hi)
}

// verdict fails the command when the run shows something wrong: requests
// without an answer, server errors, or a storm that charged more than once.
func (r benchResult) verdict() error {
	var errs []error
	if r.errors > 0 {
		errs = append(errs, fmt.Errorf("%d requests got no answer", r.errors))
	}
	server := 0
	for s, c := range r.statuses {
		if s >= 500 {
			server += c
		}
	}
	if server > 0 {
		errs = append(errs, fmt.Errorf("%d answers were server errors", server))
	}
	for i, f := range r.fresh {
		if f > 1 || r.bodies[i] > 1 {
			errs = append(errs, fmt.Errorf("storm %d: %d fresh 201s and %d distinct success bodies for one key", i+1, f, r.bodies[i]))
		}
	}
	return errors.Join(errs...)
}

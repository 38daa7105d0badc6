package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"paytwice/pay/peers"
	"paytwice/store/postgres"
)

// maxClusterServers bounds -servers: each server is a whole process with
// its own database connections, and a classroom needs two or three.
const maxClusterServers = 16

// runCluster is "paytwice cluster": N servers of this same binary on one
// PostgreSQL database, each on a loopback port of its own, behind a small
// round-robin front door. The two requests of a double-click then land on
// two servers, and only the database can keep them from charging twice.
func runCluster(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("cluster", "Starts several paytwice servers on one PostgreSQL database, each on a loopback port of its own,\n"+
		"and a round-robin front door before them: the requests of one double-click land on two servers.", stdout, stderr)
	servers := fs.Int("servers", 3, fmt.Sprintf("how many servers to start, 1 to %d", maxClusterServers))
	dbURL := fs.String("db", os.Getenv("PAYTWICE_DB"), "the postgres:// URL of the database the servers share (env PAYTWICE_DB)")
	addr := fs.String("addr", cmp.Or(os.Getenv("PAYTWICE_ADDR"), "127.0.0.1:8080"), "the front door's listen address; use :8080 to let a classroom reach it (env PAYTWICE_ADDR)")
	presenter := fs.String("presenter-token", os.Getenv("PAYTWICE_PRESENTER_TOKEN"), "if set, only the presenter may change switches (env PAYTWICE_PRESENTER_TOKEN)")
	// The servers get these as flags, which win over their environment:
	// so the environment is read here, as a lone server reads it.
	var envErrs []error
	envDuration := func(name string, def time.Duration) time.Duration {
		v := os.Getenv(name)
		if v == "" {
			return def
		}
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			envErrs = append(envErrs, fmt.Errorf("%s must be a positive duration such as 30s or 24h, not %q", name, v))
			return def
		}
		return d
	}
	lockTimeout := fs.Duration("lock-timeout", envDuration("PAYTWICE_LOCK_TIMEOUT", 30*time.Second), "how long a key may stay started before a sweeper closes it (env PAYTWICE_LOCK_TIMEOUT)")
	retention := fs.Duration("retention", envDuration("PAYTWICE_RETENTION", 24*time.Hour), "how long done keys are kept (env PAYTWICE_RETENTION)")
	if help, err := fs.parse(args); help || err != nil {
		return err
	}
	if len(envErrs) > 0 {
		return valueError{errors.Join(envErrs...)}
	}
	switch {
	case !postgres.IsURL(*dbURL):
		return badValue("-db must be a postgres:// URL that every server can reach, such as postgres://user:password@127.0.0.1:5432/paytwice, not %q: "+
			"servers on SQLite files of their own would not share their keys", *dbURL)
	case *servers < 1 || *servers > maxClusterServers:
		return badValue("-servers must be between 1 and %d, not %d", maxClusterServers, *servers)
	case *lockTimeout <= 0 || *retention <= 0:
		return badValue("-lock-timeout and -retention must be positive durations such as 30s or 24h")
	case *lockTimeout < minLockTimeout:
		return badValue("-lock-timeout must be at least %v, not %v", minLockTimeout, *lockTimeout)
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this program to start its servers: %w", err)
	}

	front, err := net.Listen("tcp", *addr)
	if err != nil {
		return listenError(*addr, err)
	}
	defer front.Close()
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	out := &lockedLines{stdout: stdout, stderr: stderr}
	// The front door's mark on the requests it forwards: only with it does
	// a server believe X-Forwarded-For, so a client on this machine that
	// reaches a server's port directly cannot name itself anyone it likes.
	doorMark := make([]byte, 16)
	_, _ = rand.Read(doorMark)
	serversURL, pool := boundPools(*dbURL, *servers)
	childArgs := []string{"-public-addr", front.Addr().String(),
		"-lock-timeout", lockTimeout.String(), "-retention", retention.String()}
	var children []*child
	defer func() { stopChildren(children, out, childShutdownLimit) }() // on an early return; a no-op once they have exited
	for i := range *servers {
		c, err := startChild(exe, fmt.Sprintf("s%d", i+1), childArgs, []string{
			// The URL holds the database's password: an environment
			// variable, as the token, not a flag.
			"PAYTWICE_DB=" + serversURL,
			"PAYTWICE_PRESENTER_TOKEN=" + *presenter,
			frontDoorMarkVariable + "=" + hex.EncodeToString(doorMark),
		}, out)
		if err != nil {
			return err
		}
		children = append(children, c)
	}
	if err := waitUntilServing(ctx, children); err != nil {
		return err
	}

	door := newFrontDoor(children, hex.EncodeToString(doorMark), stderr)
	out.printf(stdout, "%d servers on one database, each on a loopback port of its own:\n", len(children))
	for _, c := range children {
		out.printf(stdout, "  %s  %s  pid %d\n", c.name, c.url, c.cmd.Process.Pid)
	}
	out.printf(stdout, "and a front door that hands each request to the next of them in turn.\n")
	if pool > 0 {
		out.printf(stdout, "Each server's connection pool holds at most %d connections (pool_max_conns), so the servers fit within PostgreSQL's default of 100.\n", pool)
	}
	out.mu.Lock()
	printURLs(stdout, front.Addr().(*net.TCPAddr), *presenter)
	out.mu.Unlock()
	for _, c := range children {
		go func() {
			<-c.exited
			if ctx.Err() == nil { // not asked to stop: it died
				out.printf(stderr, "paytwice cluster: server %s stopped: %v; the front door passes it over\n", c.name, c.waitErr)
			}
		}()
	}

	hs := &http.Server{Handler: door, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	serveErr := make(chan error, 1)
	go func() { serveErr <- hs.Serve(front) }()
	select {
	case err := <-serveErr:
		return err
	case <-ctx.Done():
	}
	out.printf(stdout, "shutting down\n")
	// The front door stops taking connections, but requests already in it
	// go on: the servers answer their payments in flight and end their
	// event streams as they shut down, which ends those requests too.
	shutdownDone := make(chan error, 1)
	go func() {
		shutdownCtx, cancel := context.WithTimeout(context.Background(), childShutdownLimit+5*time.Second)
		defer cancel()
		shutdownDone <- hs.Shutdown(shutdownCtx)
	}()
	err = stopChildren(children, out, childShutdownLimit)
	if serr := <-shutdownDone; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, fmt.Errorf("front door: %w", serr))
	}
	return err
}

// childShutdownLimit is how long a server may take to stop after SIGTERM
// (its own shutdown gives payments in flight 15 seconds) before it is
// killed.
const childShutdownLimit = 20 * time.Second

// listenFDVariable hands a server a listener its parent opened: the
// number of an inherited file descriptor. The parent keeps the port from
// the moment it chose it, so no other program can take it before the
// server starts.
const listenFDVariable = "PAYTWICE_LISTEN_FD"

// inheritedListener is the listener listenFDVariable names, or nil when
// it names none.
func inheritedListener(getenv func(string) string) (net.Listener, error) {
	v := getenv(listenFDVariable)
	if v == "" {
		return nil, nil
	}
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return nil, fmt.Errorf("%s must name an inherited file descriptor (3 or more), not %q", listenFDVariable, v)
	}
	f := os.NewFile(uintptr(fd), "inherited listener")
	defer f.Close() // FileListener holds a duplicate
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("%s=%d: %w", listenFDVariable, fd, err)
	}
	return ln, nil
}

// child is one server process of the cluster.
type child struct {
	name   string
	url    *url.URL // http://127.0.0.1:port
	cmd    *exec.Cmd
	exited chan struct{} // closed once the process has exited
	// waitErr says how it ended; read it once exited is closed.
	waitErr error
	// epoch is the epoch of the event ids this server's streams carry,
	// as its last stream's answer said (peers.StreamEpochHeader): the
	// front door sends a page resuming from such an id back here.
	epoch atomic.Pointer[string]
}

// hasExited reports whether the process is gone.
func (c *child) hasExited() bool {
	select {
	case <-c.exited:
		return true
	default:
		return false
	}
}

// startChild runs this binary as the server called name with args and
// the variables env, on a loopback listener opened here. Secrets go in
// env: command lines are visible to every user of the machine.
func startChild(exe, name string, args, env []string, out *lockedLines) (*child, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("server %s: %w", name, err)
	}
	f, err := ln.(*net.TCPListener).File()
	// The child holds its own copy. Closing this one matters: were the
	// parent to keep the socket, connections to a dead child would wait in
	// its queue instead of being refused and sent to another server.
	ln.Close()
	if err != nil {
		return nil, fmt.Errorf("server %s: %w", name, err)
	}
	defer f.Close()
	cmd := exec.Command(exe, append([]string{"-name", name}, args...)...)
	cmd.ExtraFiles = []*os.File{f} // descriptor 3
	cmd.SysProcAttr = serverProcAttr()
	cmd.Env = append(append(os.Environ(), env...), listenFDVariable+"=3")
	stdout, stderr := out.prefixed(name, false), out.prefixed(name, true)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting server %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, exited: make(chan struct{}),
		url: &url.URL{Scheme: "http", Host: ln.Addr().String()}}
	go func() {
		c.waitErr = cmd.Wait()
		stdout.flush()
		stderr.flush()
		close(c.exited)
	}()
	return c, nil
}

// waitUntilServing asks each server for its key policy and waits for the
// answers. The listeners are open from the start, so a request waits in
// the queue until its server serves: no polling, no retry.
func waitUntilServing(ctx context.Context, children []*child) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	errs := make(chan error, len(children))
	for _, c := range children {
		go func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.url.JoinPath("/v1/idempotency-policy").String(), nil)
			answered := make(chan error, 1)
			go func() {
				res, err := http.DefaultClient.Do(req)
				if err == nil {
					res.Body.Close()
					if res.StatusCode != http.StatusOK {
						err = fmt.Errorf("status %d", res.StatusCode)
					}
				}
				answered <- err
			}()
			exitedFirst := func() error { // read c.waitErr once c.exited is closed
				return fmt.Errorf("server %s exited before serving (%v); its output above says why", c.name, c.waitErr)
			}
			select {
			case err := <-answered:
				if err != nil {
					// The listener is the server's alone: a connection it
					// dropped means it is exiting, and its exit says more.
					// Interrupted (Ctrl-C), the cluster stops at once.
					select {
					case <-c.exited:
						err = exitedFirst()
					case <-ctx.Done():
						err = fmt.Errorf("server %s did not answer at %s: %w", c.name, c.url, err)
					case <-time.After(5 * time.Second):
						err = fmt.Errorf("server %s did not answer at %s: %w", c.name, c.url, err)
					}
				}
				errs <- err
			case <-c.exited:
				errs <- exitedFirst()
			}
		}()
	}
	var all []error
	for range children {
		all = append(all, <-errs)
	}
	return errors.Join(all...)
}

// stopChildren sends SIGTERM to every server still running and waits for
// each to exit, killing every one still running once limit has passed.
// A server that ends with an error then is reported in the returned
// error; one that had died before was reported when it did.
func stopChildren(children []*child, out *lockedLines, limit time.Duration) error {
	var running []*child
	for _, c := range children {
		if !c.hasExited() {
			running = append(running, c)
			_ = c.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	var errs []error
	// One deadline for all of them, closed once passed: every server still
	// running then is killed, not only the first one waited for.
	deadline, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	for _, c := range running {
		select {
		case <-c.exited:
		case <-deadline.Done():
			out.printf(out.stderr, "paytwice cluster: server %s did not stop within %v; killing it\n", c.name, limit)
			_ = c.cmd.Process.Kill()
			<-c.exited
		}
		if c.waitErr != nil {
			errs = append(errs, fmt.Errorf("server %s: %w", c.name, c.waitErr))
		}
	}
	return errors.Join(errs...)
}

// frontDoor hands each request to the next server in turn, as a load
// balancer would, passing over servers that are gone. Writes (POST, PUT,
// PATCH, DELETE) take their turns apart from reads: a page's own reads
// (its event stream, the lab's and the vote's refreshes) may fire
// between the two clicks of a double-click, and on one shared turn they
// could send both clicks to the same server, which is the thing the
// cluster is there to show.
type frontDoor struct {
	servers   []*child
	nextWrite atomic.Uint64
	nextRead  atomic.Uint64
	proxy     *httputil.ReverseProxy
}

// hop is one try of a request on one server.
type hop struct {
	server *child
	err    error // why the proxy could not get an answer
}

type hopKey struct{}

// Bounds of what the front door reads of a server's answer. The servers
// are this command's own, but a bound costs nothing and keeps a server
// gone wrong from taking the door's memory with it: past one, the client
// gets a 502 that names it. Time is bounded by the servers themselves
// (the gateway time-out, step mode's limit per checkpoint) and by the
// wait for an answer's headers, which step mode may stretch to minutes.
const (
	frontDoorMaxHeader = 1 << 20
	frontDoorMaxBody   = 64 << 20 // a class's timeline export is a few MiB
	frontDoorWait      = 15 * time.Minute
)

// cappedBody fails a read past left bytes.
type cappedBody struct {
	io.ReadCloser
	left int64
}

func (c *cappedBody) Read(p []byte) (int, error) {
	if c.left <= 0 {
		var one [1]byte
		if n, err := c.ReadCloser.Read(one[:]); n == 0 && err == io.EOF {
			return 0, io.EOF // exactly the bound
		}
		return 0, errFrontDoorBody
	}
	p = p[:min(int64(len(p)), c.left)]
	n, err := c.ReadCloser.Read(p)
	c.left -= int64(n)
	return n, err
}

// errFrontDoorBody says a server's answer was larger than the door
// forwards.
var errFrontDoorBody = fmt.Errorf("its answer's body is larger than the front door forwards (%d MiB)", frontDoorMaxBody>>20)

func newFrontDoor(servers []*child, mark string, stderr io.Writer) *frontDoor {
	d := &frontDoor{servers: servers}
	d.proxy = &httputil.ReverseProxy{
		Transport: &http.Transport{
			Proxy:                  nil,
			DialContext:            (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConnsPerHost:    256,
			IdleConnTimeout:        90 * time.Second,
			MaxResponseHeaderBytes: frontDoorMaxHeader,
			ResponseHeaderTimeout:  frontDoorWait,
		},
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(pr.In.Context().Value(hopKey{}).(*hop).server.url)
			// The Host the browser used: the cross-origin guard compares it
			// with Origin, and the board shows it as the join address.
			pr.Out.Host = pr.In.Host
			// Only the address this front door saw: a client's own
			// X-Forwarded-For is not to be believed.
			pr.SetXForwarded()
			// Set, never passed on: a client's own copy is overwritten.
			pr.Out.Header.Set(peers.FrontDoorHeader, mark)
		},
		// Event streams reach the browser as each event is written.
		FlushInterval: -1,
		ModifyResponse: func(res *http.Response) error {
			// A server closes the connection after each checkout payment so
			// that the browser sends the next attempt on a fresh one
			// (web/payments.go, freshConnectionPerPayment): Connection is a
			// hop-by-hop header the proxy drops, so say it again for the
			// browser's connection to this door.
			if res.Close {
				res.Header.Set("Connection", "close")
			}
			if epoch := res.Header.Get(peers.StreamEpochHeader); epoch != "" {
				res.Request.Context().Value(hopKey{}).(*hop).server.epoch.Store(&epoch)
			}
			if res.ContentLength > frontDoorMaxBody {
				return errFrontDoorBody
			}
			if !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
				// An answer of unknown length is cut at the bound: the
				// client sees its connection end, never a shortened answer
				// that looks whole.
				res.Body = &cappedBody{ReadCloser: res.Body, left: frontDoorMaxBody}
			}
			return nil
		},
		ErrorHandler: func(_ http.ResponseWriter, r *http.Request, err error) {
			if strings.Contains(err.Error(), "response headers exceeded") {
				err = fmt.Errorf("its answer's headers are larger than the front door reads (%d KiB)", frontDoorMaxHeader>>10)
			}
			r.Context().Value(hopKey{}).(*hop).err = err // ServeHTTP answers
		},
		ErrorLog: log.New(stderr, "paytwice cluster: front door: ", 0),
	}
	return d
}

// ServeHTTP sends r to the next server. A server that refuses the
// connection never saw the request, so the next one gets it; one that
// took it and failed may have acted on it, so the client is told, and
// retries with its key, rather than the door sending it again itself.
func (d *frontDoor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Body != nil && r.Body != http.NoBody {
		// The proxy closes the body it forwarded; kept open, it can still
		// go to the next server after a refused connection read none of it.
		r.Body = io.NopCloser(r.Body)
	}
	n := uint64(len(d.servers))
	turn := &d.nextRead
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
	default:
		turn = &d.nextWrite
	}
	order := make([]*child, 0, n)
	if isWorkshopPath(r.URL.Path) {
		// The workshop lives in one server's memory (web/workshop): its
		// registrations, runs and students' gateways all go to the first
		// server still running, in the same order every time, so a
		// student's gateway charges land where their run is judged.
		order = append(order, d.servers...)
		d.serve(w, r, order)
		return
	}
	// A page resuming its event stream goes back first to the server that
	// numbered its events, while it runs: that server alone can send it
	// exactly the frames it missed, where any other draws the whole room
	// again.
	home := d.streamHome(r)
	if home != nil {
		order = append(order, home)
	}
	first := turn.Add(1)
	for i := range n {
		if c := d.servers[(first+i)%n]; c != home {
			order = append(order, c)
		}
	}
	d.serve(w, r, order)
}

// isWorkshopPath reports whether path belongs to the workshop: its
// pages, its API and the students' gateways.
func isWorkshopPath(path string) bool {
	for _, root := range []string{"/workshop", "/api/workshop"} {
		if path == root || strings.HasPrefix(path, root+"/") {
			return true
		}
	}
	return false
}

// serve sends r to the first server of order that runs and takes the
// connection.
func (d *frontDoor) serve(w http.ResponseWriter, r *http.Request, order []*child) {
	n := len(d.servers)
	for _, server := range order {
		h := &hop{server: server}
		if h.server.hasExited() {
			continue
		}
		d.proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), hopKey{}, h)))
		switch {
		case h.err == nil:
			return
		case errors.Is(h.err, syscall.ECONNREFUSED):
			continue
		case r.Context().Err() != nil:
			return // the client left: nobody to answer
		}
		writeFrontDoorProblem(w, http.StatusBadGateway, fmt.Sprintf(
			"Server %s took the request but gave no answer (%v). It may have acted on it: retry with the same Idempotency-Key, never a new one.",
			h.server.name, h.err))
		return
	}
	writeFrontDoorProblem(w, http.StatusServiceUnavailable, fmt.Sprintf(
		"None of the %d servers behind this front door is running or accepting connections; their output says why.", n))
}

// streamHome is the server that numbered the events a page resumes its
// event stream from (GET /events with Last-Event-ID, or ?since= on its
// first connection), nil for any other request, for an id without an
// epoch, or when no server runs under that epoch any more.
func (d *frontDoor) streamHome(r *http.Request) *child {
	if r.Method != http.MethodGet || r.URL.Path != "/events" {
		return nil
	}
	id := r.Header.Get("Last-Event-ID")
	if id == "" {
		id = r.URL.Query().Get("since")
	}
	i := strings.LastIndexByte(id, '-')
	if i <= 0 {
		return nil
	}
	epoch := id[:i]
	for _, c := range d.servers {
		if e := c.epoch.Load(); e != nil && *e == epoch && !c.hasExited() {
			return c
		}
	}
	return nil
}

// writeFrontDoorProblem answers for the door itself, as problem+json. Its
// type is about:blank: the explanation pages live on the servers, which
// are what failed.
func writeFrontDoorProblem(w http.ResponseWriter, status int, detail string) {
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	// Both of its answers invite a retry with the same key: a 502 when a
	// server took the request and gave no answer (the key on that server
	// holds whatever it did), a 503 when no server could take it.
	h.Set("Retry-After", "1")
	h.Set("Stripe-Should-Retry", "true")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}{"about:blank", http.StatusText(status), status, detail})
}

// lockedLines writes the servers' output and the cluster's own lines
// whole, one at a time, so that lines of several processes never mix.
type lockedLines struct {
	mu             sync.Mutex
	stdout, stderr io.Writer
}

func (l *lockedLines) printf(w io.Writer, format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(w, format, args...)
}

// prefixed is a writer for one server's stdout or stderr that puts its
// name before each of its lines.
func (l *lockedLines) prefixed(name string, toStderr bool) *prefixedLines {
	w := l.stdout
	if toStderr {
		w = l.stderr
	}
	return &prefixedLines{out: l, w: w, prefix: []byte(name + " | ")}
}

// prefixedLines holds a partial line until its end arrives.
type prefixedLines struct {
	out     *lockedLines
	w       io.Writer
	prefix  []byte
	partial []byte
}

func (p *prefixedLines) Write(b []byte) (int, error) {
	n := len(b)
	for {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			p.partial = append(p.partial, b...)
			return n, nil
		}
		p.writeLine(b[:i+1])
		b = b[i+1:]
	}
}

func (p *prefixedLines) writeLine(end []byte) {
	line := append(append(append([]byte(nil), p.prefix...), p.partial...), end...)
	p.partial = p.partial[:0]
	p.out.mu.Lock()
	defer p.out.mu.Unlock()
	_, _ = p.w.Write(line)
}

// flush writes a last line that had no newline.
func (p *prefixedLines) flush() {
	if len(p.partial) > 0 {
		p.writeLine([]byte("\n"))
	}
}

// boundPools gives each of n servers a connection pool small enough that
// all of them fit within PostgreSQL's default max_connections of 100: a
// server holds one pool (the payments and the gateway's ledger, which
// share the database) and two listening connections, and ten connections
// are left for psql and the like. A URL that already names pool_max_conns
// is left as it is (pool 0): the operator has chosen.
func boundPools(dbURL string, n int) (string, int) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return dbURL, 0 // the server reports the URL's fault itself
	}
	q := u.Query()
	if q.Has("pool_max_conns") {
		return dbURL, 0
	}
	pool := min(max(90/n-2, 2), 16)
	q.Set("pool_max_conns", strconv.Itoa(pool))
	u.RawQuery = q.Encode()
	return u.String(), pool
}

package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"paytwice/pay/addrlimit"
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
	limitsFlag := fs.String("limits", os.Getenv("PAYTWICE_LIMITS"), "the room's fair shares per client address, as paytwice -h lists them, for every server (env PAYTWICE_LIMITS); the front door bounds each address's connections, requests in flight, live views and the presenter's reserve by them, across all the servers")
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
	shares, err := addrlimit.ParseShares(*limitsFlag)
	if err != nil {
		return badValue("-limits: %v", err)
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
	childEnv := []string{
		// The URL holds the database's password: an environment
		// variable, as the token, not a flag.
		"PAYTWICE_DB=" + serversURL,
		"PAYTWICE_PRESENTER_TOKEN=" + *presenter,
		frontDoorMarkVariable + "=" + hex.EncodeToString(doorMark),
		// The servers check every limit, and refuse to start on a
		// wrong one; the door has read its own above.
		"PAYTWICE_LIMITS=" + *limitsFlag,
	}
	procs := 0 // GOMAXPROCS given to each server; 0: the operator's, inherited
	if os.Getenv("GOMAXPROCS") == "" {
		procs = serverProcs(runtime.GOMAXPROCS(0), *servers)
		childEnv = append(childEnv, "GOMAXPROCS="+strconv.Itoa(procs))
	}
	var children []*child
	defer func() { stopChildren(children, out, childShutdownLimit) }() // on an early return; a no-op once they have exited
	for i := range *servers {
		c, err := startChild(exe, fmt.Sprintf("s%d", i+1), childArgs, childEnv, out)
		if err != nil {
			return err
		}
		children = append(children, c)
	}
	if err := waitUntilServing(ctx, children); err != nil {
		return err
	}

	door := newFrontDoor(children, hex.EncodeToString(doorMark), stderr)
	door.bound(shares, peers.PresenterCookieValue(*presenter, []byte(os.Getenv(presenterCookieKeyVariable))), time.Now)
	out.printf(stdout, "%d servers on one database, each on a loopback port of its own:\n", len(children))
	for _, c := range children {
		out.printf(stdout, "  %s  %s  pid %d\n", c.name, c.url, c.cmd.Process.Pid)
	}
	out.printf(stdout, "and a front door that hands each request to the next of them in turn.\n")
	if procs > 0 {
		out.printf(stdout, "Each server runs Go code on at most %d of the %d cores this cluster may use (GOMAXPROCS=%d; set GOMAXPROCS to choose).\n", procs, runtime.GOMAXPROCS(0), procs)
	}
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
	// The servers see every connection come from this door, on loopback:
	// the door is where a student's address is seen, so it bounds each
	// address's open connections and requests in flight (frontDoor).
	go func() {
		serveErr <- hs.Serve(door.listener(front))
	}()
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

// serverProcs is the GOMAXPROCS each of n servers of one cluster gets
// when the operator set none: its share of the procs cores the cluster
// may use (the machine's, or its cgroup's quota), at least one. Each Go
// runtime otherwise runs on every core, and three of them on two cores
// spend the CPU the payments need on switching threads and spinning for
// work: on two cores three servers at GOMAXPROCS=1 used 1.29–1.65x one
// server's CPU per payment (median 1.37x) where the default used
// 1.42–1.92x (median 1.71x), lower in each of six alternating rounds
// (bench/servers.sh; docs/benchmarks.md, "Where three servers' extra CPU
// goes").
func serverProcs(procs, n int) int {
	return max(1, procs/max(1, n))
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

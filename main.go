// Command paytwice serves a payments API that makes a double-clicked Pay
// button charge once, and the live pages that show how.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"paytwice/pay"
	"paytwice/sim"
	"paytwice/web"
)

// mayReplaceProcess is set by main alone: the server may then replace its
// process to take its timer slack (holdTimerSlack), which a test that calls
// run in its own process must never do.
var mayReplaceProcess bool

func main() {
	mayReplaceProcess = true
	err := run(context.Background(), os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	os.Exit(exitCode(err, os.Stderr))
}

// exitCode prints err and says how the process ends: 0 when all went well,
// 2 for a command line that was wrong (its message and the usage are
// already printed), a command's own status (exitStatus), 1 for anything else.
func exitCode(err error, stderr io.Writer) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errUsage):
		return 2
	}
	var bad valueError
	if errors.As(err, &bad) {
		fmt.Fprintln(stderr, "paytwice:", err)
		fmt.Fprintln(stderr, "(paytwice -h lists the flags, paytwice help CMD a command's)")
		return 2
	}
	var status exitStatus
	if errors.As(err, &status) { // the command has printed why
		return int(status)
	}
	fmt.Fprintln(stderr, "paytwice:", err)
	return 1
}

// run parses flags (each with a PAYTWICE_* environment variable as its
// default), listens, opens the store and serves until SIGINT or SIGTERM.
// A first argument naming a command (see commands in cmd.go) runs that
// instead; "help" prints the usage.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("paytwice", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {} // printed below, once, with the commands
	var envErrs []string // flag name, message: PAYTWICE_* values that are not durations
	env := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	envDuration := func(flagName, name string, def time.Duration) time.Duration {
		v := getenv(name)
		if v == "" {
			return def
		}
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			envErrs = append(envErrs, flagName, fmt.Sprintf("%s must be a positive duration such as 30s or 24h, not %q", name, v))
			return def
		}
		return d
	}
	envCount := func(flagName, name string, def int) int {
		v := getenv(name)
		if v == "" {
			return def
		}
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			envErrs = append(envErrs, flagName, fmt.Sprintf("%s must be a positive whole number, not %q", name, v))
			return def
		}
		return n
	}
	addr := fs.String("addr", env("PAYTWICE_ADDR", "127.0.0.1:8080"), "listen address; use :8080 to let a classroom reach it (env PAYTWICE_ADDR)")
	dbPath := fs.String("db", env("PAYTWICE_DB", "paytwice.db"), "SQLite database file, or a postgres:// URL to share one PostgreSQL database between several servers (env PAYTWICE_DB)")
	gatewayDB := fs.String("gateway-db", env("PAYTWICE_GATEWAY_DB", ""), "the simulated gateway's own SQLite file or postgres:// URL (env PAYTWICE_GATEWAY_DB; default: next to a -db file, named <db>-gateway.db; with a postgres:// -db, the schema gateway of that database)")
	retention := fs.Duration("retention", envDuration("retention", "PAYTWICE_RETENTION", 24*time.Hour), "how long done keys are kept (env PAYTWICE_RETENTION)")
	lockTimeout := fs.Duration("lock-timeout", envDuration("lock-timeout", "PAYTWICE_LOCK_TIMEOUT", 30*time.Second), "how long a key may stay started before the sweeper closes it (env PAYTWICE_LOCK_TIMEOUT)")
	presenter := fs.String("presenter-token", env("PAYTWICE_PRESENTER_TOKEN", ""), "if set, only the presenter may change switches (env PAYTWICE_PRESENTER_TOKEN)")
	maxStreams := fs.Int("max-streams", envCount("max-streams", "PAYTWICE_MAX_STREAMS", web.DefaultMaxStreams), "most live event streams (open pages) served at once; more get 503 and Retry-After (env PAYTWICE_MAX_STREAMS)")
	limitsFlag := fs.String("limits", env("PAYTWICE_LIMITS", ""), "the room's fair shares per client address, as name=value pairs separated by commas over these defaults (env PAYTWICE_LIMITS); -max-streams sets streams:"+web.LimitsUsage())
	name := fs.String("name", env("PAYTWICE_NAME", ""), "this server's name on the timeline when several servers share one PostgreSQL database (env PAYTWICE_NAME; default there: host:port)")
	publicAddr := fs.String("public-addr", env("PAYTWICE_PUBLIC_ADDR", ""), "behind a proxy or load balancer, the address students reach it at, such as :8080 or 192.168.1.20:8080: the board and /join show it instead of -addr (env PAYTWICE_PUBLIC_ADDR)")
	workshopAllow := fs.String("workshop-allow", env("PAYTWICE_WORKSHOP_ALLOW", ""), "the networks, addresses and address:port entries the workshop may call students' endpoints on, separated by commas, such as 192.168.1.0/24 (env PAYTWICE_WORKSHOP_ALLOW; default: the private network of the interface this server is served on; this machine itself only at an address:port listed)")
	synchronous := fs.String("synchronous", env("PAYTWICE_SYNCHRONOUS", "FULL"), "SQLite synchronous setting: FULL survives power loss (env PAYTWICE_SYNCHRONOUS)")
	memoryLimitFlag := fs.String("memory-limit", env("PAYTWICE_MEMORY_LIMIT", formatMemoryLimitFlag(defaultMemoryLimit)), "soft limit on the Go runtime's memory, such as 256MiB or 1GiB, or off: near it the garbage collector runs more often, so the heap does not grow to twice what is live; GOMEMLIMIT, if set, wins (env PAYTWICE_MEMORY_LIMIT)")
	timerSlackFlag := fs.String("timer-slack", env("PAYTWICE_TIMER_SLACK", "auto"), "how late the kernel may wake the server's threads from a timed sleep: a duration from 1µs to 10ms, off for the slack it was started with, or auto: "+defaultTimerSlack.String()+" for a server on one P (GOMAXPROCS=1, as paytwice cluster starts three servers on two cores), whose Go runtime then switches threads less often under load, none otherwise (Linux; env PAYTWICE_TIMER_SLACK)")
	showVersion := fs.Bool("version", false, "print the module version and the VCS revision, as paytwice version does, and exit")
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		if sub, ok := subcommands[args[0]]; ok {
			return sub(ctx, args[1:], stdout, stderr)
		}
		if args[0] == "help" {
			return help(args[1:], stdout, stderr, fs)
		}
		return badUsage(stderr, fs, unknownCommand(args[0]))
	}
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp): // asked for, like paytwice help: on stdout
		printUsage(stdout, fs)
		return nil
	case err != nil: // the flag package has said what was wrong
		printUsage(stderr, fs)
		return errUsage
	case fs.NArg() > 0:
		return badUsage(stderr, fs, unexpectedArg(fs.Arg(0)))
	}
	if *showVersion {
		return runVersion(ctx, nil, stdout, stderr)
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for i := 0; i < len(envErrs); i += 2 {
		if !set[envErrs[i]] { // a flag on the command line wins over its variable
			return badValue("%s", envErrs[i+1])
		}
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"retention", *retention}, {"lock-timeout", *lockTimeout}} {
		if f.d <= 0 {
			return badValue("-%s must be a positive duration such as 30s or 24h, not %v", f.name, f.d)
		}
	}
	if *lockTimeout < minLockTimeout {
		return badValue("-lock-timeout must be at least %v (a held request renews its key's lease every third of it), not %v", minLockTimeout, *lockTimeout)
	}
	if *maxStreams <= 0 {
		return badValue("-max-streams must be a positive whole number, not %d", *maxStreams)
	}
	limits, err := web.ParseLimits(*limitsFlag)
	if err != nil {
		return badValue("-limits: %v", err)
	}
	allowWorkshop, err := web.ParseWorkshopAllow(*workshopAllow)
	if err != nil {
		return badValue("-workshop-allow: %v", err)
	}
	if *workshopAllow == "" {
		allowWorkshop = nil // the default: the network the room is served on
	}
	if set["max-streams"] || getenv("PAYTWICE_MAX_STREAMS") != "" {
		limits.MaxStreams = *maxStreams
	}
	if len(*name) > maxServerName || strings.IndexFunc(*name, func(r rune) bool { return !strconv.IsPrint(r) }) >= 0 {
		return badValue("-name must be at most %d printable characters, not %q", maxServerName, *name)
	}
	var public *net.TCPAddr
	if *publicAddr != "" {
		if public, err = parsePublicAddr(*publicAddr); err != nil {
			return valueError{err}
		}
	}
	limitGivenBy := ""
	if set["memory-limit"] {
		limitGivenBy = "-memory-limit"
	} else if getenv("PAYTWICE_MEMORY_LIMIT") != "" {
		limitGivenBy = "PAYTWICE_MEMORY_LIMIT"
	}
	memoryLimit, err := chooseMemoryLimit(*memoryLimitFlag, limitGivenBy, getenv)
	if err != nil {
		return badValue("%v", err)
	}
	slackGivenBy := ""
	if set["timer-slack"] {
		slackGivenBy = "-timer-slack"
	} else if getenv("PAYTWICE_TIMER_SLACK") != "" {
		slackGivenBy = "PAYTWICE_TIMER_SLACK"
	}
	timerSlack, err := chooseTimerSlack(*timerSlackFlag, slackGivenBy, runtime.GOMAXPROCS(0))
	if err != nil {
		return badValue("%v", err)
	}
	syncMode := strings.ToUpper(*synchronous)
	switch syncMode {
	case "FULL", "EXTRA", "NORMAL", "OFF":
	default:
		return badValue("-synchronous must be FULL, EXTRA, NORMAL or OFF, not %q", *synchronous)
	}

	// Before anything is opened: taking the slack may replace the process,
	// which starts this function again with the same arguments.
	slackHeld, slackWhy := holdTimerSlack(timerSlack, mayReplaceProcess)

	// Listen first: a port that is taken must not leave new database files
	// behind. Under paytwice cluster the listener comes open from the
	// front door's process instead.
	ln, err := inheritedListener(getenv)
	if err != nil {
		return err
	}
	behindFrontDoor := ln != nil // only paytwice cluster hands a listener down
	command := "paytwice cluster"
	if ln == nil {
		command = "paytwice"
		if ln, err = net.Listen("tcp", *addr); err != nil {
			return listenError(*addr, err)
		}
	}
	defer ln.Close()
	if public == nil {
		public = ln.Addr().(*net.TCPAddr)
	}
	heldLimit := applyMemoryLimit(memoryLimit)
	raiseHeapFloor(heldLimit)
	clock := sim.NewClock(nil)
	openStart := time.Now()
	st, err := openStores(ctx, *dbPath, *gatewayDB, clock.Now, syncMode)
	if err != nil {
		return err
	}
	opened := time.Since(openStart)
	defer st.Close()

	if *name == "" && st.peers.Shared() {
		*name = defaultServerName(ln.Addr().(*net.TCPAddr))
	}
	srv := web.NewServer(web.Config{Ledger: st.ledger, Peers: st.peers, Retention: *retention, LockTimeout: *lockTimeout, PresenterToken: *presenter,
		Limits: limits, Name: *name, ListenAddr: public, Listener: ln.Addr(), Command: command, BehindFrontDoor: behindFrontDoor,
		FrontDoorMark: getenv(frontDoorMarkVariable), WorkshopAllow: allowWorkshop,
		// A secret, so an environment variable only, never a flag (command
		// lines are visible to every user): servers behind one load balancer
		// share it, so that the presenter's cookie counts on all of them.
		PresenterCookieKey: []byte(getenv(presenterCookieKeyVariable))}, st.db, clock)
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	// What a crash left behind is found before the first request can
	// arrive (later, a started key may belong to a live request), and
	// closed while the server serves: each key costs a question to the
	// gateway and a commit, and a crash under load leaves hundreds. A
	// request for one of them meanwhile is answered 409 with Retry-After,
	// as for any key at work.
	// On a database other servers share, their requests may be running:
	// the ordinary sweep decides there, which closes at once the keys of
	// servers whose life has ended (this one's previous life among them,
	// killed with its payments held) and leaves the live ones' to the
	// lock timeout.
	var orphans []pay.KeyRow
	srvJobs := srv.Jobs()
	if !st.peers.Shared() {
		if orphans, err = srvJobs.Orphans(ctx); err != nil {
			return fmt.Errorf("start-up sweep: %w", err)
		}
	}

	boardToken := *presenter
	if *publicAddr != "" {
		boardToken = "" // behind a proxy, the board's link is the proxy's
	}
	// The start-up sweep says what it closed while the server serves.
	stdout, stderr = &lockedWriter{w: stdout}, &lockedWriter{w: stderr}
	fmt.Fprintln(stdout, memoryLimitLine(heldLimit, memoryLimit))
	fmt.Fprintln(stdout, timerSlackLine(slackHeld, slackWhy, timerSlack))
	printURLs(stdout, ln.Addr().(*net.TCPAddr), boardToken)
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	serveErr := make(chan error, 1)
	go func() { serveErr <- hs.Serve(srv.Listener(ln)) }()
	jobs := make(chan struct{})
	go func() {
		defer close(jobs)
		sweepStart := time.Now()
		if !st.peers.Shared() {
			closed, err := srvJobs.SweepFound(ctx, orphans)
			printStartupSweep(stdout, closed)
			if err != nil && ctx.Err() == nil {
				fmt.Fprintf(stderr, "paytwice: start-up sweep: %v; the periodic sweep tries again\n", err)
			}
		} else if _, err := srvJobs.Sweep(ctx); err != nil && ctx.Err() == nil {
			fmt.Fprintf(stderr, "paytwice: start-up sweep: %v; the periodic sweep tries again\n", err)
		}
		found := fmt.Sprintf("%d key(s) found started", len(orphans))
		if st.peers.Shared() {
			found = "the ordinary sweep, the database being shared"
		}
		fmt.Fprintf(stdout, "start-up work done %d ms after the process started: database opened and migrated in %d ms, start-up sweep in %d ms (%s)\n",
			time.Since(processStart).Milliseconds(), opened.Milliseconds(), time.Since(sweepStart).Milliseconds(), found)
		srvJobs.Run(ctx)
	}()
	select {
	case err := <-serveErr:
		return err
	case <-ctx.Done():
	}
	fmt.Fprintln(stdout, "shutting down")
	// Event streams never end on their own: end them first, so that
	// Shutdown waits only for payments in flight, which finish their work
	// and answer before the store closes. The hub stays open until then,
	// so that those payments' steps still reach the other servers.
	srv.EndStreams()
	// Nobody will step a request held in step mode any more: end them now
	// rather than wait for them until the time-out. Those held before the
	// gateway charge nothing (nobody let them) and answer that a retry
	// with the same key runs afresh.
	if n := srv.StopHeld(); n > 0 {
		fmt.Fprintf(stdout, "ended %d request(s) held in step mode: none held before the gateway was charged\n", n)
	}
	err = shutdownServing(hs, srv)
	srv.Close()
	<-jobs
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// processStart is when the process started, as near as Go lets a
// package know: the start-up log says how long after it the start-up
// work ended.
var processStart = time.Now()

// lockedWriter lets the start-up sweep and the rest of run write to one
// stdout in whole lines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// How long a shutdown waits for the payments in flight to finish their
// work, and then, once it has ended what is left of that work, for their
// answers to go out.
const (
	shutdownWorkGrace   = 10 * time.Second
	shutdownAnswerGrace = 5 * time.Second
)

// shutdownServing stops hs, waiting for the payments in flight: those that
// finish within shutdownWorkGrace answer what they did. Past it, the work
// still under way ends (Server.AbandonWork), so that a payment waiting on
// the gateway answers that its outcome is unknown and how to find it out,
// rather than losing its connection when the process exits.
func shutdownServing(hs *http.Server, srv *web.Server) error {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownWorkGrace)
	err := hs.Shutdown(ctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	srv.AbandonWork()
	ctx, cancel = context.WithTimeout(context.Background(), shutdownAnswerGrace)
	defer cancel()
	return hs.Shutdown(ctx)
}

// presenterCookieKeyVariable names the key the presenter's cookie is
// signed with (web.Config.PresenterCookieKey); unset, the cookie is
// derived from the token alone, so that every server given the token (a
// restarted one, the servers of paytwice cluster) recognises it.
const presenterCookieKeyVariable = "PAYTWICE_PRESENTER_COOKIE_KEY"

// frontDoorMarkVariable names the mark paytwice cluster's front door puts
// on every request it forwards (web.Config.FrontDoorMark).
const frontDoorMarkVariable = "PAYTWICE_FRONT_DOOR_MARK"

// maxServerName bounds -name: it is shown on every timeline row.
const maxServerName = 40

// minLockTimeout is the shortest -lock-timeout taken: a key's lease is
// renewed every third of it, and a lock timeout shorter than a second
// would have the sweepers closing keys whose work is merely slow.
const minLockTimeout = time.Second

// defaultServerName names a server that shares its database and was not
// given -name: the machine's host name and the port, which tell the
// servers of one machine or of several apart.
func defaultServerName(addr *net.TCPAddr) string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "server"
	}
	host, _, _ = strings.Cut(host, ".")
	return net.JoinHostPort(host, strconv.Itoa(addr.Port))
}

// parsePublicAddr reads -public-addr: an IP address and a port, or only
// a port for every interface, as -addr takes them. A host name is refused:
// the board shows it only when the presenter opened the board by that
// name (web/join.go).
func parsePublicAddr(v string) (*net.TCPAddr, error) {
	host, port, err := net.SplitHostPort(v)
	n, perr := strconv.Atoi(port)
	ip := net.ParseIP(host)
	if host == "" {
		ip = net.IPv6unspecified // what a listener on ":8080" reports
	}
	if err != nil || perr != nil || n < 1 || n > 65535 || ip == nil {
		return nil, fmt.Errorf("-public-addr must be an IP address and a port, or :port, such as 192.168.1.20:8080 or :8080, not %q", v)
	}
	return &net.TCPAddr{IP: ip, Port: n}, nil
}

// gatewayPath names the gateway's file after the payments file:
// paytwice.db → paytwice-gateway.db.
func gatewayPath(dbPath string) string {
	return strings.TrimSuffix(dbPath, ".db") + "-gateway.db"
}

// printURLs tells the presenter where the app is. When it listens on every
// interface, it lists the machine's addresses: those are what students
// type on their phones.
func printURLs(w io.Writer, addr *net.TCPAddr, presenterToken string) {
	var hosts []string
	if addr.IP.IsUnspecified() {
		hosts = append(hosts, "localhost")
		if ifaces, err := net.InterfaceAddrs(); err == nil {
			for _, a := range ifaces {
				if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLoopback() && ipn.IP.To4() != nil {
					hosts = append(hosts, ipn.IP.String())
				}
			}
		}
	} else {
		hosts = append(hosts, addr.IP.String())
	}
	fmt.Fprintln(w, "paytwice is serving on:")
	for _, h := range hosts {
		fmt.Fprintf(w, "  http://%s\n", net.JoinHostPort(h, fmt.Sprint(addr.Port)))
	}
	if presenterToken != "" {
		fmt.Fprintf(w, "presenter board: http://%s/board?token=%s\n", net.JoinHostPort(hosts[0], fmt.Sprint(addr.Port)), presenterToken)
	}
}

// printStartupSweep says what the start-up sweep closed: keys a crash left
// started, each asked of the gateway. A server that says nothing here had
// none.
func printStartupSweep(w io.Writer, closed []pay.SweepOutcome) {
	for _, o := range closed {
		what := "the gateway had not charged: released, a retry runs afresh"
		switch {
		case o.Err != nil:
			what = "could not be closed (" + pay.ErrorMessage(o.Err) + "): the sweeper tries again"
		case o.Charged:
			what = "the gateway had charged: charge " + o.Charge.ID + " recorded, the key answers 201"
		}
		fmt.Fprintf(w, "start-up sweep: key %q (order %s), left started by an earlier run: %s\n", o.Row.Key, o.Row.OrderID, what)
	}
}

// startEmbeddedTarget runs a paytwice of its own on 127.0.0.1, on SQLite
// files in a new temporary directory, and returns its address and what
// stops it and removes the directory.
func startEmbeddedTarget(ctx context.Context) (*url.URL, string, func(), error) {
	dir, err := os.MkdirTemp("", "paytwice-proxy-")
	if err != nil {
		return nil, "", nil, err
	}
	clock := sim.NewClock(nil)
	st, err := openStores(ctx, filepath.Join(dir, "paytwice.db"), "", clock.Now, "NORMAL")
	if err != nil {
		os.RemoveAll(dir)
		return nil, "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		st.Close()
		os.RemoveAll(dir)
		return nil, "", nil, err
	}
	srv := web.NewServer(web.Config{Ledger: st.ledger, Peers: st.peers, ListenAddr: ln.Addr(), Command: "paytwice proxy",
		Logger: log.New(io.Discard, "", 0)}, st.db, clock)
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(ln)
	jobsCtx, stopJobs := context.WithCancel(context.Background())
	jobs := make(chan struct{})
	go func() { defer close(jobs); srv.Jobs().Run(jobsCtx) }()
	stop := func() {
		srv.EndStreams()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		hs.Shutdown(shutdownCtx)
		cancel()
		srv.Close()
		stopJobs()
		<-jobs
		st.Close()
		os.RemoveAll(dir)
	}
	return &url.URL{Scheme: "http", Host: ln.Addr().String()}, dir, stop, nil
}

// Command paytwice serves a payments API that makes a double-clicked Pay
// button charge once, and the live pages that show how.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"paytwice/sim"
	"paytwice/store"
	"paytwice/web"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "paytwice:", err)
		os.Exit(1)
	}
}

// run parses flags (each with a PAYTWICE_* environment variable as its
// default), opens the store and serves until SIGINT or SIGTERM. A first
// argument naming a subcommand (backoff, herd, pay; see cmd_*.go) runs
// that instead.
func run(ctx context.Context, args []string, getenv func(string) string, stdout *os.File) error {
	if len(args) > 0 {
		if sub, ok := subcommands[args[0]]; ok {
			return sub(ctx, args[1:], stdout, os.Stderr)
		}
	}
	fs := flag.NewFlagSet("paytwice", flag.ContinueOnError)
	env := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	addr := fs.String("addr", env("PAYTWICE_ADDR", "127.0.0.1:8080"), "listen address; use :8080 to let a classroom reach it (env PAYTWICE_ADDR)")
	dbPath := fs.String("db", env("PAYTWICE_DB", "paytwice.db"), "SQLite database file (env PAYTWICE_DB)")
	gatewayDB := fs.String("gateway-db", env("PAYTWICE_GATEWAY_DB", ""), "the simulated gateway's own SQLite file (env PAYTWICE_GATEWAY_DB; default: next to -db, named <db>-gateway.db)")
	retention := fs.String("retention", env("PAYTWICE_RETENTION", "24h"), "how long done keys are kept (env PAYTWICE_RETENTION)")
	lockTimeout := fs.String("lock-timeout", env("PAYTWICE_LOCK_TIMEOUT", "30s"), "how long a key may stay started before the sweeper closes it (env PAYTWICE_LOCK_TIMEOUT)")
	presenter := fs.String("presenter-token", env("PAYTWICE_PRESENTER_TOKEN", ""), "if set, only the presenter may change switches (env PAYTWICE_PRESENTER_TOKEN)")
	synchronous := fs.String("synchronous", env("PAYTWICE_SYNCHRONOUS", "FULL"), "SQLite synchronous setting: FULL survives power loss (env PAYTWICE_SYNCHRONOUS)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ret, err := parsePositiveDuration("retention", *retention)
	if err != nil {
		return err
	}
	lock, err := parsePositiveDuration("lock-timeout", *lockTimeout)
	if err != nil {
		return err
	}
	switch strings.ToUpper(*synchronous) {
	case "FULL", "EXTRA", "NORMAL", "OFF":
	default:
		return fmt.Errorf("-synchronous must be FULL, EXTRA, NORMAL or OFF, not %q", *synchronous)
	}

	clock := sim.NewClock(nil)
	syncMode := strings.ToUpper(*synchronous)
	db, err := store.Open(*dbPath, store.Options{Now: clock.Now, Synchronous: syncMode, Schema: store.SchemaPayments})
	if err != nil {
		return err
	}
	defer db.Close()
	ledger, err := store.Open(cmp.Or(*gatewayDB, gatewayPath(*dbPath)), store.Options{Now: clock.Now, Synchronous: syncMode, Schema: store.SchemaLedger})
	if err != nil {
		return err
	}
	defer ledger.Close()

	srv := web.NewServer(web.Config{Ledger: ledger, Retention: ret, LockTimeout: lock, PresenterToken: *presenter}, db, clock)
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Close what a crash left behind before the first request can arrive:
	// later, a started key may belong to a live request.
	if _, err := srv.SweepOrphans(ctx); err != nil {
		return fmt.Errorf("start-up sweep: %w", err)
	}
	jobs := make(chan struct{})
	go func() { defer close(jobs); srv.RunJobs(ctx) }()

	printURLs(stdout, ln.Addr().(*net.TCPAddr), *presenter)
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	serveErr := make(chan error, 1)
	go func() { serveErr <- hs.Serve(ln) }()
	select {
	case err := <-serveErr:
		return err
	case <-ctx.Done():
	}
	fmt.Fprintln(stdout, "shutting down")
	// Event streams never end on their own: end them first, so that
	// Shutdown waits only for payments in flight, which finish their work
	// and answer before the store closes.
	srv.Hub().Close()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	err = hs.Shutdown(shutdownCtx)
	srv.Close()
	<-jobs
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// gatewayPath names the gateway's file after the payments file:
// paytwice.db → paytwice-gateway.db.
func gatewayPath(dbPath string) string {
	return strings.TrimSuffix(dbPath, ".db") + "-gateway.db"
}

func parsePositiveDuration(name, v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("-%s must be a positive duration such as 30s or 24h, not %q", name, v)
	}
	return d, nil
}

// printURLs tells the presenter where the app is. When it listens on every
// interface, it lists the machine's addresses: those are what students
// type on their phones.
func printURLs(w *os.File, addr *net.TCPAddr, presenterToken string) {
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

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"paytwice/pay/proxy"
)

// runProxy is "paytwice proxy": a reverse proxy in front of a payments
// API that injects the article's failures into a client's requests and
// grades what the client does next against the ten rules (pay/proxy).
// Without -target it runs its own paytwice on SQLite in a temporary
// directory, so that "paytwice proxy" alone is ready for a client.
//
// The run ends with Ctrl-C, after -actions actions are over, or after
// -for; then it prints the grades, writes -report and -junit, and exits
// 1 when a rule is broken, 0 when all hold.
func runProxy(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("proxy", "Forwards a client's requests to a payments API, injects failures (a connection that never\n"+
		"happens, a 500 after the work, a lost response, 409/429/503 with Retry-After, a 400 or 422), and grades\n"+
		"the client's retries against ten rules. Point your client at -addr; the live page is at /_proxy/.\n\n"+
		"Exit status: 0 every rule held, 1 a rule was broken, 2 a usage error.", stdout, stderr)
	addr := fs.String("addr", "127.0.0.1:8090", "listen address: point the client here")
	target := fs.String("target", "", "the API's base URL, such as http://127.0.0.1:8080 (default: a paytwice of its own on SQLite in a temporary directory)")
	faults := fs.String("faults", "default", "faults given to each client's actions in turn, separated by commas: none, "+strings.Join(faultNameList(), ", ")+
		"; default: a schedule of 20 that puts every rule to the test")
	seed := fs.Uint64("seed", 1, "seed of -random: the same seed repeats a run whose actions arrive in the same order")
	random := fs.Float64("random", 0, "for soak runs: each action gets a fault drawn from -faults with this probability (0 to 1) instead of in turn")
	actions := fs.Int("actions", 0, "end the run once this many actions are over (0: no limit)")
	forDuration := fs.Duration("for", 0, "end the run after this long (0: no limit)")
	reportFile := fs.String("report", "", "write the record and the grades as JSON to this file (schema in docs/proxy.md)")
	junitFile := fs.String("junit", "", "write the grades as JUnit XML to this file, for CI")
	budget := fs.Duration("budget", proxy.DefaultBudget, "the longest the client says one action may take, waits included (rule 9)")
	maxAttempts := fs.Int("max-attempts", proxy.DefaultMaxAttempts, "the most attempts the client says it makes for one action (rule 9)")
	settle := fs.Duration("settle", 10*time.Second, "with -actions: an action whose client has been quiet this long is over")
	if help, err := fs.parse(args); help || err != nil {
		return err
	}
	schedule, err := proxy.ParseFaults(*faults)
	switch {
	case err != nil:
		return valueError{fmt.Errorf("-faults: %w", err)}
	case *random < 0 || *random > 1:
		return badValue("-random must be a probability from 0 to 1, not %v", *random)
	case *actions < 0:
		return badValue("-actions must be 0 (no limit) or a positive number, not %d", *actions)
	case *forDuration < 0:
		return badValue("-for must be 0 (no limit) or a positive duration, not %v", *forDuration)
	case *budget <= 0:
		return badValue("-budget must be a positive duration such as 30s, not %v", *budget)
	case *maxAttempts <= 0:
		return badValue("-max-attempts must be a positive number, not %d", *maxAttempts)
	case *settle <= 0:
		return badValue("-settle must be a positive duration, not %v", *settle)
	}
	var targetURL *url.URL
	if *target != "" {
		u, err := url.Parse(*target)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return badValue("-target must be an http:// or https:// URL such as http://127.0.0.1:8080, not %q", *target)
		}
		targetURL = u
	}

	// Listen first: a port that is taken must not start a server behind.
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("cannot listen on %s: the address is already in use; choose another with -addr, such as -addr 127.0.0.1:8091", *addr)
		}
		return fmt.Errorf("cannot listen on %s: %w", *addr, err)
	}
	defer ln.Close()
	what := "the API"
	if targetURL == nil {
		u, dir, stop, err := startEmbeddedTarget(ctx)
		if err != nil {
			return err
		}
		defer stop()
		targetURL, what = u, "a paytwice of its own on SQLite in "+dir
	}
	// The API may be anyone's: what is read of its policy and its books is
	// bounded in time, in headers and (where it is read) in body.
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxResponseHeaderBytes: proxy.MaxResponseHeader}}
	retention, policyNote := targetRetention(ctx, hc, targetURL)

	live := newProxyLive()
	p, err := proxy.New(proxy.Config{Target: targetURL, Schedule: schedule, Random: *random, Seed: *seed,
		Budget: *budget, MaxAttempts: *maxAttempts, Retention: retention, OnChange: live.changed})
	if err != nil {
		return valueError{err}
	}
	live.proxy = p
	hs := &http.Server{Handler: live.routes(p), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	serveErr := make(chan error, 1)
	go func() { serveErr <- hs.Serve(ln) }()

	// Catch Ctrl-C before saying where to point the client: from then
	// on it ends the run with the grades, never the process without them.
	sigCtx, stopSignals := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stopSignals()
	base := "http://" + ln.Addr().String()
	fmt.Fprintf(stdout, "paytwice proxy: %s forwards to %s (%s)\n", base, targetURL, what)
	fmt.Fprintf(stdout, "live page: %s/_proxy/\n", base)
	fmt.Fprintf(stdout, "faults in turn: %s\n", joinFaults(schedule))
	if policyNote != "" {
		fmt.Fprintln(stdout, policyNote)
	}
	fmt.Fprintf(stdout, "point your client at %s; Ctrl-C ends the run and prints the grades\n", base)

	var deadline <-chan time.Time
	if *forDuration > 0 {
		t := time.NewTimer(*forDuration)
		defer t.Stop()
		deadline = t.C
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	why := ""
wait:
	for {
		select {
		case err := <-serveErr:
			return err
		case <-sigCtx.Done():
			why = "interrupted"
			break wait
		case <-deadline:
			why = fmt.Sprintf("%v went by", *forDuration)
			break wait
		case <-tick.C:
			if *actions > 0 {
				if n, open := p.Progress(*settle); n >= *actions && open == 0 {
					why = fmt.Sprintf("%d actions are over", n)
					break wait
				}
			}
		}
	}
	stopSignals() // a second Ctrl-C ends the process at once
	live.close()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	hs.Shutdown(shutdownCtx)
	cancel()

	gradeCtx, cancelGrade := context.WithTimeout(context.Background(), time.Minute)
	rep := p.Grade(gradeCtx, proxy.APIBooks(targetURL, hc))
	cancelGrade()
	fmt.Fprintf(stdout, "\nrun ended: %s\n", why)
	printGrades(stdout, rep)
	if *reportFile != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(*reportFile, append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("-report: %w", err)
		}
	}
	if *junitFile != "" {
		b, err := rep.JUnit()
		if err != nil {
			return err
		}
		if err := os.WriteFile(*junitFile, b, 0o644); err != nil {
			return fmt.Errorf("-junit: %w", err)
		}
	}
	if rep.Broken {
		return exitStatus(1)
	}
	return nil
}

func faultNameList() []string {
	out := make([]string, len(proxy.Faults))
	for i, f := range proxy.Faults {
		out[i] = string(f)
	}
	return out
}

func joinFaults(fs []proxy.Fault) string {
	s := make([]string, len(fs))
	for i, f := range fs {
		s[i] = string(f)
	}
	return strings.Join(s, ", ")
}

// targetRetention reads the key retention the API publishes
// (GET /v1/idempotency-policy); rule 9 holds a client's retries inside
// it. An API that publishes none leaves it unknown, and the note says so.
func targetRetention(ctx context.Context, hc *http.Client, target *url.URL) (time.Duration, string) {
	u := *target
	u.Path = strings.TrimRight(u.Path, "/") + "/v1/idempotency-policy"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return 0, ""
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, fmt.Sprintf("the API did not answer its key policy (%v): rule 9 holds retries to the budget only", err)
	}
	defer resp.Body.Close()
	var policy struct {
		RetentionSeconds int64 `json:"retention_seconds"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&policy) != nil || policy.RetentionSeconds <= 0 {
		return 0, "the API publishes no key retention at /v1/idempotency-policy: rule 9 holds retries to the budget only"
	}
	return time.Duration(policy.RetentionSeconds) * time.Second, ""
}

// printGrades prints each client's grade on every rule.
func printGrades(w io.Writer, rep proxy.Report) {
	if len(rep.Clients) == 0 {
		fmt.Fprintln(w, "no client sent a POST: nothing to grade")
		return
	}
	broken := 0
	for _, c := range rep.Clients {
		attempts := 0
		for _, a := range c.Actions {
			attempts += len(a.Attempts)
		}
		fmt.Fprintf(w, "\nclient %s: %d actions, %d attempts\n", c.Client, len(c.Actions), attempts)
		for _, g := range c.Grades {
			line := fmt.Sprintf("  %2d %-30s %-13s", g.Rule, g.Name, g.Verdict)
			switch g.Verdict {
			case proxy.Broken:
				broken++
				line += fmt.Sprintf(" %d of %d times; first: %s", g.Broken, g.Exercised, g.Detail)
			case proxy.Passed:
				line += fmt.Sprintf(" put to the test %d times", g.Exercised)
				if g.Detail != "" { // the part of the rule not judged
					line += "; " + g.Detail
				}
			default:
				line += " " + g.Detail
			}
			fmt.Fprintln(w, strings.TrimRight(line, " "))
		}
	}
	if rep.Unrecorded > 0 {
		fmt.Fprintf(w, "\n%d requests were forwarded without being recorded: past the bounds of clients or actions kept\n", rep.Unrecorded)
	}
	if broken > 0 {
		fmt.Fprintf(w, "\n%d rule(s) broken: exit status 1\n", broken)
	} else {
		fmt.Fprintln(w, "\nno rule broken")
	}
}

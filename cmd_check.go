package main

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"paytwice/pay/check"
)

// exitStatus ends the process with its value once the command has said
// everything it had to: paytwice check's statuses 1 and 3.
type exitStatus int

func (e exitStatus) Error() string { return "exit status " + strconv.Itoa(int(e)) }

// headerFlags is the repeatable -H 'Name: value'.
type headerFlags struct{ h http.Header }

func (f *headerFlags) String() string { return "" }

func (f *headerFlags) Set(v string) error {
	name, value, ok := strings.Cut(v, ":")
	name = strings.TrimSpace(name)
	if !ok || name == "" || strings.ContainsAny(name, " \t") {
		return fmt.Errorf("want 'Name: value', not %q", v)
	}
	f.h.Add(name, strings.TrimSpace(value))
	return nil
}

// caseList is -cases 1,4,9.
type caseList []int

func (c *caseList) String() string { return "" }

func (c *caseList) Set(v string) error {
	for _, part := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil {
			return fmt.Errorf("want case numbers such as 1,4,9, not %q", v)
		}
		*c = append(*c, n)
	}
	return nil
}

// runCheck is "paytwice check URL": the idempotency checker against any
// endpoint (pay/check), or -verify FILE to check a saved history.
func runCheck(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("check", "Tests the Idempotency-Key behaviour of the endpoint at URL from outside, and checks the history\n"+
		"of what it sent for linearizability (Porcupine). Usage: paytwice check [flags] URL, or paytwice check -verify FILE.\n\n"+
		"Exit status: 0 every case passed (DIFFERS allowed), 1 a case failed or the history is not linearizable,\n"+
		"2 a usage error, or nothing could be tested: the endpoint cannot be reached, does not take a good payment,\n"+
		"or an oracle (-count-url, -gateway) does not count that payment's one effect; 3 only DIFFERS, with -strict.\n"+
		"The report's first line: paytwice check: N PASS, N DIFFERS, N FAIL, N SKIP (oracle: gateway|count-url|none) — exit N.", stdout, stderr)
	headers := &headerFlags{h: http.Header{}}
	var only caseList
	body := fs.String("body", check.DefaultBody, "request body; {{id}} is a fresh value per action, {{amount}} an integer the checker may change")
	form := fs.Bool("form", false, "send -body as application/x-www-form-urlencoded instead of JSON")
	fs.Var(headers, "H", "a header for every request, 'Name: value' (repeatable), such as -H 'Authorization: Bearer alice'")
	otherAuth := fs.String("other-auth", "", "a second caller's Authorization value, for the two-callers case (skipped without it)")
	keyHeader := fs.String("key-header", check.DefaultKeyHeader, "the idempotency key's header")
	countURL := fs.String("count-url", "", "GET that lists one action's effects, with {{id}}, such as 'http://127.0.0.1:8080/v1/payments?order_id={{id}}'")
	countField := fs.String("count-field", "", "the top-level field of -count-url's answer holding the array (empty: the answer is the array)")
	gateway := fs.String("gateway", "", "the simulated gateway the endpoint charges through (paytwice serves one at /sim/gateway): its books count the effects")
	gatewayToken := fs.String("gateway-token", "", "the presenter token of the server serving -gateway, sent as X-Presenter-Token when the checker flips its switches")
	presenterToken := fs.String("presenter-token", "", "the presenter token of a class server (paytwice serve -presenter-token): sent as X-Presenter-Token with every request, so the check's storms are not held to a student's share; also -gateway-token's default")
	jsonOut := fs.Bool("json", false, "print the report as JSON")
	junit := fs.String("junit", "", "write the report as JUnit XML to this file")
	seed := fs.Uint64("seed", 0, "seed for keys and ids, to repeat a run (default: random)")
	storm := fs.Int("c", check.DefaultStorm, "requests in the storm of one key")
	strict := fs.Bool("strict", false, "exit 3 when cases only differ from the draft")
	history := fs.String("history", "", "write every request of the run to this file (JSON Lines)")
	verify := fs.String("verify", "", "check a saved history (or a timeline export of paytwice) instead of running; on a violation, write its HTML view next to it")
	timeout := fs.Duration("timeout", check.DefaultTimeout, "time-out of each request")
	replayAfter := fs.Duration("replay-after", 0, "wait this long before the replay of case 1 (to test retention)")
	patience := fs.Duration("patience", check.DefaultPatience, "how long a retry waits for a key whose first request is still running (a server's lock timeout)")
	fs.Var(&only, "cases", "run only these cases, such as 1,4,9")
	rounds := fs.Int("rounds", check.DefaultRounds, "storms of one key in case 4, each with a key of its own")
	otherPath := fs.String("other-path", "", "a second POST path of the API, such as /v1/refunds: case 3 sends a payment's key there too")
	profile := fs.String("profile", check.ProfileDraft, "the conventions DIFFERS is measured against: draft (the IETF draft) or stripe")
	maxHeader := fs.Int64("max-header-bytes", check.DefaultMaxHeaderBytes, "bound on one answer's headers")
	maxBody := fs.Int64("max-body-bytes", check.DefaultMaxBodyBytes, "bound on one answer's body (bodies are compared whole, by hash, up to it)")
	verifyTimeout := fs.Duration("verify-timeout", check.DefaultVerifyTimeout, "bound on the check of the history: past it, the history is reported not decided")
	insecure := fs.Bool("insecure", false, "do not verify the endpoint's TLS certificate")
	cacert := fs.String("cacert", "", "PEM file of the certificate authorities to trust for TLS endpoints (instead of the system's)")
	if help, err := fs.parseSome(args); help || err != nil {
		return err
	}
	// Flags may come after the URL too.
	var target string
	if fs.NArg() > 0 {
		target = fs.Arg(0)
		if help, err := fs.parseSome(fs.Args()[1:]); help || err != nil {
			return err
		}
		if fs.NArg() > 0 {
			return badValue("unexpected argument %q: give one URL", fs.Arg(0))
		}
	}
	if *verify != "" {
		if target != "" {
			return badValue("give -verify FILE or a URL, not both")
		}
		return verifyHistory(*verify, *verifyTimeout, stdout)
	}
	if target == "" {
		return badValue("give the endpoint's URL, such as: paytwice check http://127.0.0.1:8080/v1/payments")
	}
	if *presenterToken != "" {
		headers.h.Set(check.PresenterHeader, *presenterToken)
		if *gatewayToken == "" {
			*gatewayToken = *presenterToken
		}
	}
	if *seed == 0 {
		*seed = uint64(time.Now().UnixNano())
	}
	cfg := check.Config{URL: target, Body: *body, Form: *form, Header: headers.h, OtherAuth: *otherAuth,
		KeyHeader: *keyHeader, CountURL: *countURL, CountField: *countField, Gateway: *gateway, GatewayToken: *gatewayToken,
		Storm: *storm, Seed: *seed, Timeout: *timeout, Patience: *patience, ReplayAfter: *replayAfter, Only: only,
		Rounds: *rounds, OtherPath: *otherPath, Profile: *profile, Strict: *strict,
		MaxHeaderBytes: *maxHeader, MaxBodyBytes: *maxBody, VerifyTimeout: *verifyTimeout, Insecure: *insecure}
	if *rounds < 1 || *maxHeader < 1 || *maxBody < 1 || *verifyTimeout <= 0 {
		return badValue("-rounds, -max-header-bytes, -max-body-bytes and -verify-timeout must be positive")
	}
	if *cacert != "" {
		pem, err := os.ReadFile(*cacert)
		if err != nil {
			return badValue("-cacert: %v", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return badValue("-cacert %s: no PEM certificate in it", *cacert)
		}
	}
	if err := cfg.Validate(); err != nil {
		return valueError{err}
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt)
	defer stop()
	rep, err := check.Run(ctx, cfg)
	if errors.Is(err, check.ErrUnreachable) || errors.Is(err, check.ErrNotAccepted) || errors.Is(err, check.ErrOracle) {
		// Nothing was tested: no verdict is printed, only why.
		fmt.Fprintln(stderr, "paytwice check: nothing tested:", err)
		return exitStatus(check.ExitUsage)
	}
	if err != nil {
		return err
	}
	if *history != "" {
		if err := writeHistoryFile(*history, rep.History); err != nil {
			return err
		}
		if rep.Linearizability.Result == "violation" {
			html := check.VisualizationPath(*history)
			if lin, err := check.CheckHistory(rep.History, *verifyTimeout, html); err == nil {
				rep.Linearizability = lin
			}
		}
	}
	if *jsonOut {
		if err := rep.WriteJSON(stdout); err != nil {
			return err
		}
	} else {
		rep.WriteText(stdout)
		if *history != "" {
			fmt.Fprintf(stdout, "history written to %s", *history)
			if v := rep.Linearizability.Visualization; v != "" {
				fmt.Fprintf(stdout, "; the violation is drawn in %s", v)
			}
			fmt.Fprintln(stdout)
		}
	}
	if *junit != "" {
		f, err := os.Create(*junit)
		if err != nil {
			return err
		}
		werr := rep.WriteJUnit(f)
		if err := f.Close(); werr == nil {
			werr = err
		}
		if werr != nil {
			return werr
		}
	}
	if code := rep.ExitCode(*strict); code != 0 {
		return exitStatus(code)
	}
	return nil
}

func writeHistoryFile(path string, records []check.Record) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	werr := check.WriteHistory(f, records)
	if err := f.Close(); werr == nil {
		werr = err
	}
	return werr
}

// verifyHistory is -verify FILE.
func verifyHistory(path string, timeout time.Duration, stdout io.Writer) error {
	f, err := os.Open(path)
	if err != nil {
		return badValue("-verify: %v", err)
	}
	records, err := check.ReadHistory(f)
	f.Close()
	if err != nil {
		return badValue("-verify %s: %v", path, err)
	}
	lin, err := check.CheckHistory(records, timeout, check.VisualizationPath(path))
	if err != nil {
		return err
	}
	switch lin.Result {
	case "ok":
		fmt.Fprintf(stdout, "%s: %d operations, linearizable against the model of idempotent payments\n", path, lin.Operations)
		return nil
	case "violation":
		fmt.Fprintf(stdout, "%s: %d operations, NOT linearizable: no order of them keeps one effect per action and one answer per key\n", path, lin.Operations)
		fmt.Fprintf(stdout, "groups with no legal order: %s\n", strings.Join(lin.Groups, ", "))
		fmt.Fprintf(stdout, "the violation is drawn in %s (open it in a browser)\n", lin.Visualization)
		return exitStatus(check.ExitFailed)
	}
	fmt.Fprintf(stdout, "%s: %d operations; not decided in %.0f s (-verify-timeout)\n", path, lin.Operations, timeout.Seconds())
	return exitStatus(check.ExitFailed)
}

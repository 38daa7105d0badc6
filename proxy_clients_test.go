package main

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"paytwice/pay/proxy"
)

// These tests put real clients through the proxy in front of a real
// paytwice (SQLite file, 127.0.0.1), and read the grades the proxy gives
// them: a careful client passes every rule, and each client that makes
// one mistake breaks that rule and no other.

// proxyRun is a proxy in front of a fresh paytwice.
type proxyRun struct {
	target *payTarget
	proxy  *proxy.Proxy
	url    string
}

func newProxyRun(t *testing.T, cfg proxy.Config) *proxyRun {
	t.Helper()
	target := newPayTarget(t)
	u, err := url.Parse(target.url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Target = u
	if cfg.Budget == 0 {
		cfg.Budget = 8 * time.Second
	}
	if cfg.MaxAttempts == 0 {
		cfg.MaxAttempts = 8
	}
	p, err := proxy.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(p)
	t.Cleanup(hs.Close)
	return &proxyRun{target: target, proxy: p, url: hs.URL}
}

// grade is the run's final report, the books read through the API.
func (r *proxyRun) grade(t *testing.T) proxy.Report {
	t.Helper()
	u, _ := url.Parse(r.target.url)
	return r.proxy.Grade(context.Background(), proxy.APIBooks(u, &http.Client{Timeout: 10 * time.Second}))
}

// onlyClient is the report's one client.
func onlyClient(t *testing.T, rep proxy.Report) proxy.ClientReport {
	t.Helper()
	if len(rep.Clients) != 1 {
		t.Fatalf("%d clients in the report, want 1: %+v", len(rep.Clients), rep.Clients)
	}
	return rep.Clients[0]
}

// verdicts lists the rules by verdict, and says each one.
func verdicts(c proxy.ClientReport) (broken []proxy.Rule, summary string) {
	var b strings.Builder
	for _, g := range c.Grades {
		fmt.Fprintf(&b, "  rule %d %s: %s (exercised %d, broken %d) %s\n", g.Rule, g.Name, g.Verdict, g.Exercised, g.Broken, g.Detail)
		if g.Verdict == proxy.Broken {
			broken = append(broken, g.Rule)
		}
	}
	return broken, b.String()
}

// wantGrades fails unless exactly the rules in broken are broken, and
// every other rule was put to the test and passed (except those in
// unjudged, which a mistake keeps from being judged on their own).
func wantGrades(t *testing.T, c proxy.ClientReport, broken []proxy.Rule, unjudged ...proxy.Rule) {
	t.Helper()
	got, summary := verdicts(c)
	t.Logf("grades:\n%s", summary)
	if !slices.Equal(got, broken) {
		t.Fatalf("broken rules %v, want %v:\n%s\nrule 7's waits: %s", got, broken, summary, waitsByRetry(c))
	}
	for _, g := range c.Grades {
		if g.Verdict != proxy.Broken && g.Verdict != proxy.Passed && !slices.Contains(unjudged, g.Rule) {
			t.Fatalf("rule %d was not judged (%s), want every rule put to the test:\n%s", g.Rule, g.Verdict, summary)
		}
	}
}

// waitsByRetry lists the waits rule 7 judged, sorted, before each retry
// index: what a verdict on real clocks was made of.
func waitsByRetry(c proxy.ClientReport) string {
	by := map[int][]float64{}
	for _, w := range c.Waits {
		by[w.Retry] = append(by[w.Retry], w.WaitMS)
	}
	var b strings.Builder
	for _, n := range slices.Sorted(maps.Keys(by)) {
		fmt.Fprintf(&b, "\n  before retry %d: %.0f", n+1, slices.Sorted(slices.Values(by[n])))
	}
	return b.String()
}

// runClient runs a testdata client over the default schedule's twenty
// actions, to its end.
func runClient(t *testing.T, py, script, baseURL, prefix string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, script, baseURL, fmt.Sprint(len(proxy.DefaultSchedule)), prefix, "7")
	cmd.Dir = "testdata/proxy"
	cmd.Env = append(os.Environ(), "CLIENT_BACKOFF_SPEEDUP=10")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", script, err, out)
	}
	return string(out)
}

func TestProxyGradesACarefulClient(t *testing.T) {
	clientsSideBySide(t)
	py := python3(t)
	run := newProxyRun(t, proxy.Config{})
	out := runClient(t, py, "retrying.py", run.url, "CAREFUL")
	c := onlyClient(t, run.grade(t))
	wantGrades(t, c, nil)
	if len(c.Actions) != len(proxy.DefaultSchedule) {
		t.Fatalf("%d actions recorded, want %d:\n%s", len(c.Actions), len(proxy.DefaultSchedule), out)
	}
	// Every lost response was followed up, and the books hold one
	// charge for each such order.
	for _, a := range c.Actions {
		if a.Fault == proxy.Lost && (a.Charges == nil || *a.Charges != 1) {
			t.Fatalf("action %d lost its answer; books: %s", a.ID, a.Books)
		}
	}
}

func TestProxyGradesEachMistakeAsItsRule(t *testing.T) {
	waitsSideBySide(t)
	py := python3(t)
	cases := []struct {
		script   string
		broken   proxy.Rule
		unjudged []proxy.Rule
	}{
		// A client that changes keys on every retry changes them after
		// a 500 and a lost answer too: rules 5 and 10 are not judged
		// apart from rule 2.
		{"new_key_per_retry.py", proxy.RuleSameKey, []proxy.Rule{proxy.RuleAfter500, proxy.RuleLostResponse}},
		{"retry_every_4xx.py", proxy.RuleNo4xxRetry, nil},
		{"new_key_after_500.py", proxy.RuleAfter500, nil},
		{"no_jitter.py", proxy.RuleJitter, nil},
		{"no_growth.py", proxy.RuleJitter, nil},
		{"ignores_retry_after.py", proxy.RuleRetryAfter, nil},
		{"never_gives_up.py", proxy.RuleBudget, nil},
	}
	for _, tc := range cases {
		t.Run(strings.TrimSuffix(tc.script, ".py")+" breaks rule "+fmt.Sprint(int(tc.broken))+" and no other", func(t *testing.T) {
			clientsSideBySide(t) // a proxy and a server of its own
			run := newProxyRun(t, proxy.Config{})
			runClient(t, py, tc.script, run.url, "M")
			wantGrades(t, onlyClient(t, run.grade(t)), []proxy.Rule{tc.broken}, tc.unjudged...)
		})
	}
}

func TestProxyGradesTheArticlesClient(t *testing.T) {
	clientsSideBySide(t)
	py := python3(t)
	run := newProxyRun(t, proxy.Config{})
	out := runClient(t, py, "article_client.py", run.url, "ART")
	// The lost answers end the call with RemoteDisconnected, which its
	// except clauses do not name.
	if !strings.Contains(out, "exception RemoteDisconnected") {
		t.Fatalf("no RemoteDisconnected in:\n%s", out)
	}
	c := onlyClient(t, run.grade(t))
	// As described, it reads no Retry-After (rule 8), and a lost answer
	// ends it without the saved answer (rule 10); every other rule holds.
	wantGrades(t, c, []proxy.Rule{proxy.RuleRetryAfter, proxy.RuleLostResponse})
	for _, a := range c.Actions {
		if a.Fault == proxy.Lost && (a.Charges == nil || *a.Charges != 1) {
			t.Fatalf("action %d: the lost answer's charge is not on the books once: %s", a.ID, a.Books)
		}
	}
}

func TestProxyGradesThePayCommand(t *testing.T) {
	clientsSideBySide(t)
	run := newProxyRun(t, proxy.Config{})
	for i := range proxy.DefaultSchedule {
		// Each run of paytwice pay is one action; some end in an error
		// on purpose (a 422, a service that stays down).
		runCmd(t, "pay", "-url", run.url, "-order", fmt.Sprintf("PAY-%d", i+1), "-base", "50ms", "-cap", "400ms", "-budget", "5s")
	}
	c := onlyClient(t, run.grade(t))
	wantGrades(t, c, nil)
	if len(c.Actions) != len(proxy.DefaultSchedule) {
		t.Fatalf("%d actions recorded, want %d", len(c.Actions), len(proxy.DefaultSchedule))
	}
}

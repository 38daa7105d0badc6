package main

import (
	"strings"
	"testing"
)

func TestTimerSlackChoice(t *testing.T) {
	for _, c := range []struct {
		value, givenBy string
		procs          int
		ns             int64
		source         string
	}{
		{"auto", "", 1, 4_000_000, "auto at GOMAXPROCS=1"},
		{"auto", "", 2, 0, "auto at GOMAXPROCS=2: it is for a server on one P"},
		{"auto", "-timer-slack", 8, 0, "auto at GOMAXPROCS=8: it is for a server on one P"},
		{"500us", "PAYTWICE_TIMER_SLACK", 2, 500_000, "PAYTWICE_TIMER_SLACK"},
		{"1µs", "-timer-slack", 1, 1_000, "-timer-slack"},
		{"10ms", "-timer-slack", 4, 10_000_000, "-timer-slack"},
		{"off", "-timer-slack", 1, 0, "-timer-slack off"},
	} {
		got, err := chooseTimerSlack(c.value, c.givenBy, c.procs)
		if err != nil || got.ns != c.ns || got.source != c.source {
			t.Errorf("chooseTimerSlack(%q, %q, %d) = %+v, %v; want %d ns from %q", c.value, c.givenBy, c.procs, got, err, c.ns, c.source)
		}
	}
	for _, bad := range []string{"", "0", "0s", "999ns", "11ms", "1s", "-1ms", "fast", "1 ms", "Auto"} {
		if got, err := chooseTimerSlack(bad, "-timer-slack", 1); err == nil || !strings.Contains(err.Error(), "must be auto, off, or a duration from 1µs to 10ms") {
			t.Errorf("chooseTimerSlack(%q) = %+v, %v; want it refused", bad, got, err)
		}
	}
}

func TestTimerSlackLine(t *testing.T) {
	auto1, _ := chooseTimerSlack("auto", "", 1)
	auto2, _ := chooseTimerSlack("auto", "", 2)
	for _, c := range []struct {
		held int64
		why  string
		c    timerSlackChoice
		want string
	}{
		{4_000_000, "", auto1, "timer slack: 4ms, auto at GOMAXPROCS=1 (-timer-slack or PAYTWICE_TIMER_SLACK to change it)"},
		{50_000, "", auto2, "timer slack: 50µs, as the server was started with (auto at GOMAXPROCS=2: it is for a server on one P)"},
		{2_000_000, "", timerSlackChoice{2_000_000, "-timer-slack", false}, "timer slack: 2ms, -timer-slack"},
		{50_000, "", timerSlackChoice{0, "PAYTWICE_TIMER_SLACK off", false}, "timer slack: 50µs, as the server was started with (PAYTWICE_TIMER_SLACK off)"},
		{50_000, "prctl: operation not permitted", auto1, "timer slack: 50µs, as the server was started with: 4ms was not set (prctl: operation not permitted)"},
		{-1, "", auto1, "timer slack: the system's (none is set on "},
	} {
		if got := timerSlackLine(c.held, c.why, c.c); !strings.HasPrefix(got, c.want) {
			t.Errorf("timerSlackLine(%d, %q, %+v) = %q, want %q", c.held, c.why, c.c, got, c.want)
		}
	}
}

func TestABadTimerSlackIsRefused(t *testing.T) {
	var stdout, stderr strings.Builder
	err := run(t.Context(), []string{"-addr", "127.0.0.1:0", "-db", t.TempDir() + "/x.db", "-timer-slack", "1s"}, func(string) string { return "" }, &stdout, &stderr)
	if code := exitCode(err, &stderr); code != 2 || !strings.Contains(stderr.String(), "-timer-slack must be auto, off, or a duration") {
		t.Errorf("exit %d, stderr:\n%s", code, stderr.String())
	}
	err = run(t.Context(), []string{"-addr", "127.0.0.1:0", "-db", t.TempDir() + "/x.db"}, func(k string) string {
		if k == "PAYTWICE_TIMER_SLACK" {
			return "soon"
		}
		return ""
	}, &stdout, &stderr)
	if code := exitCode(err, &stderr); code != 2 || !strings.Contains(stderr.String(), `not "soon"`) {
		t.Errorf("PAYTWICE_TIMER_SLACK=soon: exit %d, stderr:\n%s", code, stderr.String())
	}
}

package main

import (
	"strings"
	"testing"
)

func TestTimerSlackChoice(t *testing.T) {
	for _, c := range []struct {
		value, givenBy string
		ns             int64
		source         string
	}{
		{"4ms", "", 4_000_000, "the default"},
		{"500us", "PAYTWICE_TIMER_SLACK", 500_000, "PAYTWICE_TIMER_SLACK"},
		{"1µs", "-timer-slack", 1_000, "-timer-slack"},
		{"10ms", "-timer-slack", 10_000_000, "-timer-slack"},
		{"off", "-timer-slack", 0, "-timer-slack"},
	} {
		got, err := chooseTimerSlack(c.value, c.givenBy)
		if err != nil || got.ns != c.ns || got.source != c.source {
			t.Errorf("chooseTimerSlack(%q, %q) = %+v, %v; want %d ns from %s", c.value, c.givenBy, got, err, c.ns, c.source)
		}
	}
	for _, bad := range []string{"", "0", "0s", "999ns", "11ms", "1s", "-1ms", "fast", "1 ms"} {
		if got, err := chooseTimerSlack(bad, "-timer-slack"); err == nil || !strings.Contains(err.Error(), "from 1µs to 10ms") {
			t.Errorf("chooseTimerSlack(%q) = %+v, %v; want it refused", bad, got, err)
		}
	}
}

func TestTimerSlackLine(t *testing.T) {
	for _, c := range []struct {
		held int64
		why  string
		c    timerSlackChoice
		want string
	}{
		{1_000_000, "", timerSlackChoice{1_000_000, "the default"}, "timer slack: 1ms, the default (-timer-slack or PAYTWICE_TIMER_SLACK to change it, off to keep the slack it was started with)"},
		{2_000_000, "", timerSlackChoice{2_000_000, "-timer-slack"}, "timer slack: 2ms, -timer-slack"},
		{50_000, "", timerSlackChoice{0, "PAYTWICE_TIMER_SLACK"}, "timer slack: 50µs, as the server was started with (PAYTWICE_TIMER_SLACK off)"},
		{50_000, "prctl: operation not permitted", timerSlackChoice{1_000_000, "the default"}, "timer slack: 50µs, as the server was started with: 1ms was not set (prctl: operation not permitted)"},
		{-1, "", timerSlackChoice{1_000_000, "the default"}, "timer slack: the system's (none is set on "},
	} {
		if got := timerSlackLine(c.held, c.why, c.c); !strings.HasPrefix(got, c.want) {
			t.Errorf("timerSlackLine(%d, %q, %+v) = %q, want %q", c.held, c.why, c.c, got, c.want)
		}
	}
}

func TestABadTimerSlackIsRefused(t *testing.T) {
	var stdout, stderr strings.Builder
	err := run(t.Context(), []string{"-addr", "127.0.0.1:0", "-db", t.TempDir() + "/x.db", "-timer-slack", "1s"}, func(string) string { return "" }, &stdout, &stderr)
	if code := exitCode(err, &stderr); code != 2 || !strings.Contains(stderr.String(), "-timer-slack must be a duration from 1µs to 10ms") {
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

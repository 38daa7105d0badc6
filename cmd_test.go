package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"paytwice/sim"
	"paytwice/sim/report"
	"paytwice/store"
	"paytwice/web"
)

// runCmd runs a subcommand as main would and returns what it printed.
func runCmd(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	sub, ok := subcommands[args[0]]
	if !ok {
		t.Fatalf("no subcommand %q", args[0])
	}
	var out, errOut bytes.Buffer
	err = sub(context.Background(), args[1:], &out, &errOut)
	return out.String(), errOut.String(), err
}

func TestBackoffCommand(t *testing.T) {
	t.Run("the article's example prints its table, totals and spread", func(t *testing.T) {
		out, _, err := runCmd(t, "backoff", "-base", "0.5", "-cap", "8", "-retries", "5")
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{
			"Retry 1 is the first retry after the original request failed; it uses n = 0.",
			"1      0  0.5 s      0 – 0.5 s  0.25 s",
			"5      4  8 s (cap)  0 – 8 s    4 s",
			"worst-case total wait  15.5 s",
			"mean total wait        7.75 s",
			"2 requests per ms on average",
			"none          all at 0 ms",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
	})

	t.Run("-json prints what GET /api/backoff answers", func(t *testing.T) {
		out, _, err := runCmd(t, "backoff", "-json")
		if err != nil {
			t.Fatal(err)
		}
		var rep report.Backoff
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatal(err)
		}
		if rep.Totals.WorstSeconds != 15.5 || rep.Totals.MeanSeconds != 7.75 || rep.Spread.FirstRoundPerMs != 2 {
			t.Errorf("report %+v", rep.Totals)
		}
	})

	t.Run("bad flags name the flag", func(t *testing.T) {
		_, _, err := runCmd(t, "backoff", "-cap", "0.1", "-clients", "0")
		if err == nil || !strings.Contains(err.Error(), "-cap must be at least the base") || !strings.Contains(err.Error(), "-clients must be at least 1") {
			t.Errorf("error %v", err)
		}
	})

	t.Run("an unknown flag prints the usage", func(t *testing.T) {
		_, stderr, err := runCmd(t, "backoff", "-bogus")
		if err == nil || !strings.Contains(stderr, "usage: paytwice backoff") {
			t.Errorf("error %v, stderr %q", err, stderr)
		}
	})

	t.Run("-h is help, not an error", func(t *testing.T) {
		if _, stderr, err := runCmd(t, "backoff", "-h"); err != nil || !strings.Contains(stderr, "-strategy") {
			t.Errorf("error %v, stderr %q", err, stderr)
		}
	})
}

func TestHerdCommand(t *testing.T) {
	t.Run("it prints a row per client count with every strategy", func(t *testing.T) {
		out, _, err := runCmd(t, "herd", "-min", "10", "-max", "30", "-step", "10", "-trials", "2")
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"10 to 30 clients", "none  exponential", "decorrelated", "Work:", "Completion:"} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
		if rows := regexp.MustCompile(`(?m)^\s+(10|20|30)\s`).FindAllString(out, -1); len(rows) != 6 {
			t.Errorf("%d rows, want 3 per table:\n%s", len(rows), out)
		}
	})

	t.Run("-json prints what GET /api/herd answers", func(t *testing.T) {
		out, _, err := runCmd(t, "herd", "-min", "10", "-max", "20", "-step", "10", "-trials", "2", "-json")
		if err != nil {
			t.Fatal(err)
		}
		var rep report.Herd
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatal(err)
		}
		if len(rep.Points) != 10 || rep.Params.Trials != 2 {
			t.Errorf("report %+v", rep)
		}
	})

	t.Run("bad flags name the flag", func(t *testing.T) {
		if _, _, err := runCmd(t, "herd", "-min", "50", "-max", "10"); err == nil || !strings.Contains(err.Error(), "-max must be at least min") {
			t.Errorf("error %v", err)
		}
	})
}

// payServer is a real paytwice server on 127.0.0.1 over a fresh SQLite file.
func payServer(t *testing.T) string {
	t.Helper()
	clock := sim.NewClock(nil)
	db, err := store.Open(filepath.Join(t.TempDir(), "paytwice.db"), store.Options{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	srv := web.NewServer(web.Config{Logger: log.New(io.Discard, "", 0)}, db, clock)
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { srv.Close(); hs.Close(); db.Close() })
	return hs.URL
}

func TestPayCommand(t *testing.T) {
	url := payServer(t)

	t.Run("it pays once and prints the attempt", func(t *testing.T) {
		out, _, err := runCmd(t, "pay", "-url", url, "-order", "A-1001", "-amount", "129900", "-token", "cli-test")
		if err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(`attempt 1  key [0-9a-f-]{36}  201 Created`).MatchString(out) || !strings.Contains(out, `"status":"paid"`) {
			t.Errorf("output:\n%s", out)
		}
	})

	t.Run("the same key again is replayed, not charged again", func(t *testing.T) {
		args := []string{"pay", "-url", url, "-order", "A-2002", "-amount", "5000", "-token", "cli-test", "-key", "cli-key-1"}
		first, _, err := runCmd(t, args...)
		if err != nil {
			t.Fatal(err)
		}
		second, _, err := runCmd(t, args...)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(first, "replayed") || !strings.Contains(second, "attempt 1  key cli-key-1  201 Created  (replayed)") {
			t.Errorf("first:\n%s\nsecond:\n%s", first, second)
		}
		id := regexp.MustCompile(`"charge_id":"[^"]+"`)
		if id.FindString(first) != id.FindString(second) {
			t.Error("the replay shows another charge")
		}
	})

	t.Run("a different body on the same key is a 422 and an error", func(t *testing.T) {
		out, _, err := runCmd(t, "pay", "-url", url, "-order", "A-2002", "-amount", "9999", "-token", "cli-test", "-key", "cli-key-1")
		if err == nil || !strings.Contains(out, "422") || strings.Count(out, "attempt ") != 1 {
			t.Errorf("error %v, output:\n%s", err, out)
		}
	})

	t.Run("bad flags are refused before anything is sent", func(t *testing.T) {
		for _, args := range [][]string{
			{"pay", "-url", url, "-amount", "0"},
			{"pay", "-url", url, "-order", ""},
			{"pay", "-url", "127.0.0.1:8080"},
			{"pay", "-url", url, "-retries", "-1"},
		} {
			if _, _, err := runCmd(t, args...); err == nil {
				t.Errorf("%v: no error", args)
			}
		}
	})
}

func TestPayCommandRetriesWithOneKey(t *testing.T) {
	var mu sync.Mutex
	var keys []string
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		n := len(keys)
		mu.Unlock()
		if n <= 2 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"charge_id":"ch_1","status":"paid"}`)
	}))
	defer hs.Close()

	out, _, err := runCmd(t, "pay", "-url", hs.URL, "-base", "1ms", "-cap", "2ms")
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 3 || keys[0] != keys[1] || keys[1] != keys[2] {
		t.Fatalf("keys %q, want three attempts with one key", keys)
	}
	lines := regexp.MustCompile(`(?m)^attempt (\d)  key (\S+)  (\d{3})`).FindAllStringSubmatch(out, -1)
	if len(lines) != 3 || lines[0][3] != "503" || lines[1][3] != "503" || lines[2][3] != "201" {
		t.Fatalf("output:\n%s", out)
	}
	if strings.Trim(keys[0], `"`) != lines[0][2] || !strings.Contains(out, "waiting") {
		t.Errorf("key %s, output:\n%s", keys[0], out)
	}
}

func TestSubcommandDispatch(t *testing.T) {
	t.Run("a subcommand name is not a server flag", func(t *testing.T) {
		for _, name := range []string{"backoff", "herd", "pay"} {
			if _, ok := subcommands[name]; !ok {
				t.Errorf("no %s", name)
			}
		}
	})
	t.Run("run dispatches a subcommand instead of starting the server", func(t *testing.T) {
		// An unknown flag makes the subcommand fail at once, before any
		// server could start; the server's own flag set would also fail,
		// but with another usage line.
		err := run(context.Background(), []string{"backoff", "-retries", "31"}, func(string) string { return "" }, nil)
		if err == nil || !strings.Contains(err.Error(), "-retries must be at most 30") {
			t.Errorf("error %v", err)
		}
	})
}

package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

func TestBenchCommand(t *testing.T) {
	url := payServer(t)

	t.Run("new payments are all 201 and the CPU of a process is read", func(t *testing.T) {
		out, _, err := runCmd(t, "bench", "-url", url, "-c", "4", "-n", "60", "-pid", fmt.Sprint(os.Getpid()))
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		for _, want := range []string{"new payments: 4 clients, 60 requests", "requests    60 in", "throughput", "p50", "p99", "max", "statuses    201 ×60\n", "server CPU"} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
	})

	t.Run("replays are all saved answers", func(t *testing.T) {
		out, _, err := runCmd(t, "bench", "-url", url, "-mode", "replay", "-keys", "5", "-c", "3", "-n", "40")
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if !strings.Contains(out, "statuses    201 ×40, (40 marked Idempotent-Replayed)") {
			t.Errorf("output:\n%s", out)
		}
	})

	t.Run("a storm against paytwice has one fresh 201", func(t *testing.T) {
		out, _, err := runCmd(t, "bench", "-url", url, "-mode", "storm", "-c", "40", "-n", "2")
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		for _, want := range []string{"storms: 2 × 40 requests", "fresh 201s  1 per storm", "2xx bodies  1 distinct per storm"} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
	})

	t.Run("with viewers, every payment is timed from its 201 to the pages", func(t *testing.T) {
		out, _, err := runCmd(t, "bench", "-url", url, "-c", "2", "-n", "30", "-rate", "100", "-viewers", "12")
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		// 12 viewers, one in ten sampled: 2 see each of the 30 rows done.
		for _, want := range []string{"statuses    201 ×30\n", "viewers     12 open event streams (0 ended early)", "201→viewer  p50", "(60 deliveries to 2 sampled viewers)"} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
	})

	t.Run("bad flags are refused before anything is sent", func(t *testing.T) {
		for _, args := range [][]string{
			{"bench", "-url", "127.0.0.1:8080"},
			{"bench", "-url", url, "-mode", "twice"},
			{"bench", "-url", url, "-c", "0"},
			{"bench", "-url", url, "-n", "5", "-d", "1s"},
			{"bench", "-url", url, "-mode", "storm", "-d", "1s"},
			{"bench", "-url", url, "-path", "v1/payments"},
			{"bench", "-url", url, "-pid", "-3"},
			{"bench", "-url", url, "-rate", "-1"},
			{"bench", "-url", url, "-mode", "storm", "-rate", "5"},
			{"bench", "-url", url, "-viewers", "-2"},
		} {
			if _, _, err := runCmd(t, args...); err == nil {
				t.Errorf("%v: no error", args)
			}
		}
	})
}

// An endpoint that charges every request, key or not, is caught: a storm
// gets many fresh 201s with different bodies and the command fails.
func TestBenchCommandCatchesDoubleCharges(t *testing.T) {
	var charges atomic.Int64
	var mu sync.Mutex
	var auths, keys []string
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		mu.Lock()
		auths = append(auths, r.Header.Get("Authorization"))
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge_id":"ch_%d"}`, charges.Add(1))
	}))
	defer hs.Close()

	out, _, err := runCmd(t, "bench", "-url", hs.URL, "-mode", "storm", "-c", "10", "-auth", "Bearer alice")
	if err == nil || !strings.Contains(err.Error(), "storm 1: 10 fresh 201s and 10 distinct success bodies") {
		t.Errorf("error %v, output:\n%s", err, out)
	}
	if !strings.Contains(out, "fresh 201s  10 per storm") {
		t.Errorf("output:\n%s", out)
	}
	if len(auths) != 10 || auths[0] != "Bearer alice" || keys[0] != keys[9] || !strings.HasPrefix(keys[0], `"bench-`) {
		t.Errorf("authorization %q, keys %q", auths, keys)
	}
}

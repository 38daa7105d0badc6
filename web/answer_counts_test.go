package web

import (
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"paytwice/sim"
	"paytwice/store/postgres"
	"paytwice/store/postgres/pgtest"
)

// boardTiles reads the counters' numbers from the board page as a browser
// gets it: tile id → number.
func boardTiles(t *testing.T, base string) map[string]int {
	t.Helper()
	res, err := http.Get(base + "/board")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /board: %d %s", res.StatusCode, b)
	}
	// The counters are not exact around a restart or a server leaving,
	// either way, and the board says so beside them rather than claim a
	// floor.
	if !strings.Contains(string(b), "they can be off by the answers in flight then, either way") {
		t.Fatal("the board does not say that its counters of answers can be off by the answers in flight")
	}
	if strings.Contains(string(b), "never more") {
		t.Fatal("the board still claims its counters of answers are never more than what happened")
	}
	out := map[string]int{}
	for _, m := range regexp.MustCompile(`<dd id="(n-[a-z0-9]+)"[^>]*>(\d+)</dd>`).FindAllSubmatch(b, -1) {
		n, _ := strconv.Atoi(string(m[2]))
		out[string(m[1])] = n
	}
	if len(out) != 6 {
		t.Fatalf("the board shows %d counters (%v), want 6", len(out), out)
	}
	return out
}

// answerEachWay sends payments that the board counts under each of its
// counters but the 409s and lost answers: a charge, its replay, the key
// reused for another order (422) and a request with no key (400): four
// requests.
func answerEachWay(t *testing.T, base, key string) {
	t.Helper()
	send := func(key, body string) int {
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/payments", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	for _, c := range []struct {
		key, body string
		want      int
	}{
		{key, `{"order_id":"K-1","amount_satang":100}`, http.StatusCreated},
		{key, `{"order_id":"K-1","amount_satang":100}`, http.StatusCreated},
		{key, `{"order_id":"K-2","amount_satang":100}`, http.StatusUnprocessableEntity},
		{"", `{"order_id":"K-3","amount_satang":100}`, http.StatusBadRequest},
	} {
		if got := send(c.key, c.body); got != c.want {
			t.Fatalf("POST with key %q %s: %d, want %d", c.key, c.body, got, c.want)
		}
	}
}

// waitTiles reads the board until it shows want, or fails after a bound:
// the board applies events a moment after the answers left.
func waitTiles(t *testing.T, base string, want map[string]int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := boardTiles(t, base)
		same := true
		for id, n := range want {
			same = same && got[id] == n
		}
		if same {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the board shows %v, want %v", got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestBoardCountersSurviveARestartOnBothStores: the board's counters of
// requests, replays, 409s, 422s and lost answers are counted by the
// server, not read from the keys and charges; a restart on the same
// database starts the board from what the books kept of them, whether or
// not a board was open before, and a reset starts them at zero again.
func TestBoardCountersSurviveARestartOnBothStores(t *testing.T) {
	want := map[string]int{"n-requests": 4, "n-charges": 1, "n-replays": 1, "n-409": 0, "n-422": 1, "n-lost": 0}
	twice := map[string]int{"n-requests": 8, "n-charges": 2, "n-replays": 2, "n-409": 0, "n-422": 2, "n-lost": 0}
	zero := map[string]int{"n-requests": 0, "n-charges": 0, "n-replays": 0, "n-409": 0, "n-422": 0, "n-lost": 0}
	reset := func(t *testing.T, base string) {
		t.Helper()
		res, err := http.Post(base+"/api/reset", "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("reset: %d", res.StatusCode)
		}
	}
	t.Run("SQLite", func(t *testing.T) {
		r := newRestartable(t, Config{})
		// No board is open before the first restart: the server counts
		// its answers all the same.
		answerEachWay(t, r.URL(), "count-1")
		r.restart()
		waitTiles(t, r.URL(), want)
		answerEachWay(t, r.URL(), "count-2")
		waitTiles(t, r.URL(), twice)
		r.restart()
		waitTiles(t, r.URL(), twice)
		reset(t, r.URL())
		waitTiles(t, r.URL(), zero)
		r.restart()
		waitTiles(t, r.URL(), zero)
	})
	t.Run("PostgreSQL", func(t *testing.T) {
		url := pgtest.NewDatabase(t)
		open := func() (*Server, string, func()) {
			clock := sim.NewClock(nil)
			pg, err := postgres.Open(context.Background(), url, postgres.Options{Now: clock.Now, MaxConns: 4})
			if err != nil {
				t.Fatal(err)
			}
			srv := NewServer(Config{Ledger: pg, Peers: pg, Logger: log.New(io.Discard, "", 0)}, pg, clock)
			hs := httptest.NewServer(srv.Handler())
			stop := func() { hs.Close(); srv.EndStreams(); srv.Close(); pg.Close() }
			return srv, hs.URL, stop
		}
		_, url1, stop1 := open()
		answerEachWay(t, url1, "count-1")
		waitTiles(t, url1, want)
		stop1()
		_, url2, stop2 := open()
		t.Cleanup(stop2)
		waitTiles(t, url2, want)
		answerEachWay(t, url2, "count-2")
		waitTiles(t, url2, twice)
		reset(t, url2)
		waitTiles(t, url2, zero)
	})
}

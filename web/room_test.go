package web

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"paytwice/sim"
	"paytwice/store/postgres"
	"paytwice/store/postgres/pgtest"
)

// roomServer is one of several servers on one PostgreSQL database, served
// over real HTTP on 127.0.0.1.
type roomServer struct {
	t      *testing.T
	URL    string
	Server *Server
}

// startRoomServer starts a server on the database at url, as a server
// joining the class would.
func startRoomServer(t *testing.T, url, name string) *roomServer {
	t.Helper()
	clock := sim.NewClock(nil)
	db, err := postgres.Open(context.Background(), url, postgres.Options{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(Config{Name: name, Logger: log.New(io.Discard, "", 0)}, db, clock)
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { hs.Close(); srv.Close(); db.Close() })
	return &roomServer{t: t, URL: hs.URL, Server: srv}
}

// roomServers starts n servers on one fresh database.
func roomServers(t *testing.T, n int) (url string, servers []*roomServer) {
	t.Helper()
	url = pgtest.NewDatabase(t)
	for i := range n {
		servers = append(servers, startRoomServer(t, url, string(rune('A'+i))))
	}
	return url, servers
}

// call sends a request with a JSON body ("" for none).
func (s *roomServer) call(method, path, body string) response {
	s.t.Helper()
	req, err := http.NewRequest(method, s.URL+path, strings.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	r, err := do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

// must is call that insists on 200 OK.
func (s *roomServer) must(method, path, body string) response {
	s.t.Helper()
	r := s.call(method, path, body)
	if r.Status != http.StatusOK {
		s.t.Fatalf("%s %s %s: %d %s", method, path, body, r.Status, r.Body)
	}
	return r
}

func (s *roomServer) faults() FaultSettings {
	s.t.Helper()
	var f FaultSettings
	if err := json.Unmarshal(s.must(http.MethodGet, "/api/faults", "").Body, &f); err != nil {
		s.t.Fatal(err)
	}
	return f
}

func (s *roomServer) lab() LabSettings {
	s.t.Helper()
	var l LabSettings
	if err := json.Unmarshal(s.must(http.MethodGet, "/api/lab", "").Body, &l); err != nil {
		s.t.Fatal(err)
	}
	return l
}

func (s *roomServer) lesson() string {
	s.t.Helper()
	var l LessonsState
	if err := json.Unmarshal(s.must(http.MethodGet, "/api/lessons", "").Body, &l); err != nil {
		s.t.Fatal(err)
	}
	return l.Current
}

// eventually polls cond, which reads the servers, until it holds; the
// other servers learn of a change through the database, a moment after
// the change's answer. It gives up after 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10 s", what)
		}
		<-tick.C
	}
}

func TestRoomIsSharedByServersOnOneDatabase(t *testing.T) {
	url, servers := roomServers(t, 3)
	a, b, c := servers[0], servers[1], servers[2]

	t.Run("a switch flipped on one server is flipped on all", func(t *testing.T) {
		a.must(http.MethodPatch, "/api/faults", `{"server":{"crash_midway":true},"gateway":{"latency_ms":40}}`)
		for _, s := range []*roomServer{b, c} {
			eventually(t, "the switches on "+s.Server.cfg.Name, func() bool {
				f := s.faults()
				return f.Server.CrashMidway && f.Gateway.LatencyMS == 40
			})
		}
		// What the requests read, not only what the API shows.
		if f, gw := c.Server.faults.Draw(c.Server.gateway.Switches()); !f.CrashMidway || gw.LatencyMS != 40 {
			t.Fatalf("C's requests draw %+v %+v", f, gw)
		}
	})

	t.Run("PATCHes on two servers at once keep each other's fields", func(t *testing.T) {
		for i := 1; i <= 15; i++ {
			var wg sync.WaitGroup
			wg.Go(func() { a.must(http.MethodPatch, "/api/faults", fmt.Sprintf(`{"server":{"delay_ms":%d}}`, i)) })
			wg.Go(func() { b.must(http.MethodPatch, "/api/faults", fmt.Sprintf(`{"gateway":{"latency_ms":%d}}`, i)) })
			wg.Wait()
			// Both answered: the database holds both, whichever went first.
			eventually(t, fmt.Sprintf("round %d on C", i), func() bool {
				f := c.faults()
				return f.Server.DelayMS == i && f.Gateway.LatencyMS == i && f.Server.CrashMidway
			})
		}
	})

	t.Run("the lab's settings are the room's", func(t *testing.T) {
		b.must(http.MethodPatch, "/api/lab", `{"client":{"retry_every_4xx":true}}`)
		eventually(t, "the lab on A", func() bool { return a.lab().Client.RetryEvery4xx })
		if v := a.Server.lab.settingsSeq.Load(); v < 2 {
			t.Fatalf("A's lab panel version %d did not move: its pages would not redraw", v)
		}
	})

	t.Run("a lesson started on one server is the current lesson on all, with its switches", func(t *testing.T) {
		a.must(http.MethodPut, "/api/lessons/current", `{"slug":"no-key"}`)
		for _, s := range []*roomServer{b, c} {
			eventually(t, "the lesson on "+s.Server.cfg.Name, func() bool { return s.lesson() == "no-key" })
			f, l := s.faults(), s.lab()
			if f.Server.DelayMS != 800 || f.Server.CrashMidway || f.Gateway.LatencyMS != 0 || l.Server.Mode != LabNoKey || l.Client.RetryEvery4xx {
				t.Fatalf("%s: faults %+v, lab %+v: want the chapter's, and nothing from before", s.Server.cfg.Name, f, l)
			}
			if got := len(s.Server.narration.ticked("no-key")); got == 0 {
				t.Fatalf("%s narrates nothing of the chapter", s.Server.cfg.Name)
			}
		}
	})

	t.Run("the clock advanced on one server runs ahead on all, within one bound", func(t *testing.T) {
		a.must(http.MethodPost, "/api/clock/advance", `{"seconds":3600}`)
		eventually(t, "the clock on B", func() bool { return b.Server.clock.Offset() == time.Hour })
		// Three servers advancing by a week at once: together they stop at
		// the bound, never past it.
		week := int64(MaxClockAdvance / time.Second)
		var mu sync.Mutex
		taken := 0
		var wg sync.WaitGroup
		for _, s := range servers {
			wg.Go(func() {
				for range 20 {
					r := s.call(http.MethodPost, "/api/clock/advance", fmt.Sprintf(`{"seconds":%d}`, week))
					switch r.Status {
					case http.StatusOK:
						mu.Lock()
						taken++
						mu.Unlock()
					case http.StatusBadRequest:
					default:
						t.Errorf("advance: %d %s", r.Status, r.Body)
					}
				}
			})
		}
		wg.Wait()
		want := int((sim.MaxOffset - time.Hour) / MaxClockAdvance)
		if taken != want {
			t.Fatalf("%d weeks taken by three servers, want %d", taken, want)
		}
		offset := time.Hour + time.Duration(want)*MaxClockAdvance
		for _, s := range servers {
			eventually(t, "the clock on "+s.Server.cfg.Name, func() bool { return s.Server.clock.Offset() == offset })
		}
	})

	t.Run("a reset on one server turns every server's switches off", func(t *testing.T) {
		a.must(http.MethodPatch, "/api/faults", `{"server":{"server_error":true}}`)
		eventually(t, "the switch on B", func() bool { return b.faults().Server.ServerError })
		b.must(http.MethodPost, "/api/reset", "")
		for _, s := range servers {
			eventually(t, "the reset on "+s.Server.cfg.Name, func() bool {
				return s.faults() == FaultSettings{} && s.lab() == DefaultLabSettings() && s.lesson() == "" && s.Server.clock.Offset() == 0
			})
		}
	})

	t.Run("a reset heard late does not undo the lesson that followed it", func(t *testing.T) {
		a.must(http.MethodPut, "/api/lessons/current", `{"slug":"fails-halfway"}`)
		eventually(t, "the lesson on B", func() bool { return b.lesson() == "fails-halfway" })
		b.Server.resetHere() // what B does when A's Reset event reaches it
		if b.lesson() != "fails-halfway" || !b.faults().Server.FailHalfway {
			t.Fatalf("B after a late reset: lesson %q, faults %+v", b.lesson(), b.faults())
		}
	})

	t.Run("a server that starts later adopts the room", func(t *testing.T) {
		d := startRoomServer(t, url, "D")
		if d.lesson() != "fails-halfway" || !d.faults().Server.FailHalfway {
			t.Fatalf("D starts with lesson %q and faults %+v", d.lesson(), d.faults())
		}
	})

	t.Run("a server whose listener is cut reconnects and catches up", func(t *testing.T) {
		conn, err := pgx.Connect(t.Context(), url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		// A change no server is told of: only a reload finds it.
		if _, err := conn.Exec(t.Context(), `UPDATE room SET version = version + 1,
			state = jsonb_set(state, '{faults,server,delay_ms}', '1234')`); err != nil {
			t.Fatal(err)
		}
		var cut int
		if err := conn.QueryRow(t.Context(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE datname = current_database() AND query = 'LISTEN "paytwice_room"'`).Scan(&cut); err != nil || cut < len(servers) {
			t.Fatalf("%d room listeners cut, want at least %d (%v)", cut, len(servers), err)
		}
		for _, s := range servers {
			eventually(t, "the reload on "+s.Server.cfg.Name, func() bool { return s.faults().Server.DelayMS == 1234 })
		}
		// And they listen again.
		c.must(http.MethodPatch, "/api/faults", `{"gateway":{"decline":true}}`)
		eventually(t, "the next change on A", func() bool { return a.faults().Gateway.Decline })
	})
}

package web

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"paytwice/pay"
	"paytwice/sim"
	"paytwice/web/live"
	"paytwice/web/room"
)

// in is the same server seen from test t (a subtest), whose Fatal it
// calls.
func (e *testEnv) in(t *testing.T) *testEnv {
	c := *e
	c.t, c.tb = t, t
	return &c
}

// must sends a JSON body ("" for none) and insists on 200 OK.
func (e *testEnv) must(method, path, body string) response {
	e.t.Helper()
	var b any
	if body != "" {
		b = json.RawMessage(body)
	}
	r := e.send(method, path, b)
	if r.Status != http.StatusOK {
		e.t.Fatalf("%s %s %s: %d %s", method, path, body, r.Status, r.Body)
	}
	return r
}

// decodeGet reads a JSON answer of GET path into v.
func (e *testEnv) decodeGet(path string, v any) {
	e.t.Helper()
	if err := json.Unmarshal(e.must(http.MethodGet, path, "").Body, v); err != nil {
		e.t.Fatal(err)
	}
}

func (e *testEnv) faults() (f pay.Faults)       { e.decodeGet("/api/faults", &f); return f }
func (e *testEnv) labNow() (l room.LabSettings) { e.decodeGet("/api/lab", &l); return l }
func (e *testEnv) lesson() string {
	var l LessonsState
	e.decodeGet("/api/lessons", &l)
	return l.Current
}

func TestRoomIsSharedByServersOnOneDatabase(t *testing.T) {
	waitsOnRealClocks(t)
	class := newClass(t)
	var servers []*testEnv
	for _, name := range []string{"A", "B", "C"} {
		servers = append(servers, class.server(Config{Name: name}, nil))
	}
	// each returns the servers as subtest t sees them.
	each := func(t *testing.T) (a, b, c *testEnv, all []*testEnv) {
		for _, s := range servers {
			all = append(all, s.in(t))
		}
		return all[0], all[1], all[2], all
	}

	t.Run("a switch flipped on one server is flipped on all", func(t *testing.T) {
		a, b, c, _ := each(t)
		a.must(http.MethodPatch, "/api/faults", `{"server":{"crash_midway":true},"gateway":{"latency_ms":40}}`)
		for _, s := range []*testEnv{b, c} {
			waitUntil(t, "the switches on "+s.Server.cfg.Name, func() bool {
				f := s.faults()
				return f.Server.CrashMidway && f.Gateway.LatencyMS == 40
			})
		}
		// What the requests read, not only what the API shows.
		if f, gw := c.Server.faultSwitches().drawFaults(); !f.CrashMidway || gw.LatencyMS != 40 {
			t.Fatalf("C's requests draw %+v %+v", f, gw)
		}
	})

	t.Run("PATCHes on two servers at once keep each other's fields", func(t *testing.T) {
		a, b, c, _ := each(t)
		for i := 1; i <= 15; i++ {
			var wg sync.WaitGroup
			wg.Go(func() {
				a.send(http.MethodPatch, "/api/faults", json.RawMessage(fmt.Sprintf(`{"server":{"delay_ms":%d}}`, i)))
			})
			wg.Go(func() {
				b.send(http.MethodPatch, "/api/faults", json.RawMessage(fmt.Sprintf(`{"gateway":{"latency_ms":%d}}`, i)))
			})
			wg.Wait()
			// Both answered: the database holds both, whichever went first.
			waitUntil(t, fmt.Sprintf("round %d on C", i), func() bool {
				f := c.faults()
				return f.Server.DelayMS == i && f.Gateway.LatencyMS == i && f.Server.CrashMidway
			})
		}
	})

	t.Run("the lab's settings are the room's", func(t *testing.T) {
		a, b, _, _ := each(t)
		seq := labSettingsVersion(a.Server.lab.Settings())
		b.must(http.MethodPatch, "/api/lab", `{"client":{"retry_every_4xx":true}}`)
		waitUntil(t, "the lab on A", func() bool { return a.labNow().Client.RetryEvery4xx })
		if labSettingsVersion(a.Server.lab.Settings()) == seq {
			t.Fatal("A's lab panel version did not move: its pages would not redraw")
		}
	})

	t.Run("a lesson started on one server is the current lesson on all, with its switches", func(t *testing.T) {
		a, b, c, _ := each(t)
		a.must(http.MethodPut, "/api/lessons/current", `{"slug":"no-key"}`)
		for _, s := range []*testEnv{b, c} {
			waitUntil(t, "the lesson on "+s.Server.cfg.Name, func() bool { return s.lesson() == "no-key" })
			f, l := s.faults(), s.labNow()
			if f.Server.DelayMS != 800 || f.Server.CrashMidway || f.Gateway.LatencyMS != 0 || l.Server.Mode != room.LabNoKey || l.Client.RetryEvery4xx {
				t.Fatalf("%s: faults %+v, lab %+v: want the chapter's, and nothing from before", s.Server.cfg.Name, f, l)
			}
			if len(s.Server.teaching.narration.Ticked("no-key")) == 0 {
				t.Fatalf("%s narrates nothing of the chapter", s.Server.cfg.Name)
			}
		}
	})

	t.Run("the clock advanced on one server runs ahead on all, within one bound", func(t *testing.T) {
		a, b, _, all := each(t)
		a.must(http.MethodPost, "/api/clock/advance", `{"seconds":3600}`)
		waitUntil(t, "the clock on B", func() bool { return b.Server.clock.Offset() == time.Hour })
		// Three servers advancing by a week at once, 20 times each:
		// together they stop at the bound, never past it.
		week := json.RawMessage(fmt.Sprintf(`{"seconds":%d}`, int64(room.MaxClockAdvance/time.Second)))
		var taken atomic.Int64
		var wg sync.WaitGroup
		for _, s := range all {
			wg.Go(func() {
				for range 20 {
					switch r := s.send(http.MethodPost, "/api/clock/advance", week); r.Status {
					case http.StatusOK:
						taken.Add(1)
					case http.StatusBadRequest:
					default:
						t.Errorf("advance: %d %s", r.Status, r.Body)
					}
				}
			})
		}
		wg.Wait()
		want := int64((sim.MaxOffset - time.Hour) / room.MaxClockAdvance)
		if taken.Load() != want {
			t.Fatalf("%d weeks taken by three servers, want %d", taken.Load(), want)
		}
		offset := time.Hour + time.Duration(want)*room.MaxClockAdvance
		for _, s := range all {
			waitUntil(t, "the clock on "+s.Server.cfg.Name, func() bool { return s.Server.clock.Offset() == offset })
		}
	})

	t.Run("a reset on one server turns every server's switches off", func(t *testing.T) {
		a, b, _, all := each(t)
		a.must(http.MethodPatch, "/api/faults", `{"server":{"server_error":true}}`)
		waitUntil(t, "the switch on B", func() bool { return b.faults().Server.ServerError })
		b.must(http.MethodPost, "/api/reset", "")
		for _, s := range all {
			waitUntil(t, "the reset on "+s.Server.cfg.Name, func() bool {
				return s.faults() == pay.Faults{} && s.labNow() == room.DefaultLabSettings() && s.lesson() == "" && s.Server.clock.Offset() == 0
			})
		}
	})

	t.Run("a reset heard late does not undo the lesson that followed it", func(t *testing.T) {
		a, b, _, _ := each(t)
		a.must(http.MethodPut, "/api/lessons/current", `{"slug":"fails-halfway"}`)
		waitUntil(t, "the lesson on B", func() bool { return b.lesson() == "fails-halfway" })
		b.Server.demoReset().here.reset() // what B does when A's Reset event reaches it
		if b.lesson() != "fails-halfway" || !b.faults().Server.FailHalfway {
			t.Fatalf("B after a late reset: lesson %q, faults %+v", b.lesson(), b.faults())
		}
	})

	t.Run("a server that starts later adopts the room", func(t *testing.T) {
		d := class.server(Config{Name: "D"}, nil)
		if d.lesson() != "fails-halfway" || !d.faults().Server.FailHalfway {
			t.Fatalf("D starts with lesson %q and faults %+v", d.lesson(), d.faults())
		}
	})

	t.Run("an event of a change of the room is drawn with the room after it", func(t *testing.T) {
		class.postgresOnly(t)
		_, b, _, _ := each(t)
		// A change whose own notification has not reached B: only the
		// relayed event tells B of it.
		if _, err := class.pg.Pool().Exec(t.Context(), `UPDATE room SET version = version + 1,
			state = jsonb_set(state, '{faults,gateway,error}', 'true')`); err != nil {
			t.Fatal(err)
		}
		remoteEvents{b.Server}.Heard([]live.Entry{{Event: live.Event{Kind: live.Switched, Server: "X", Time: time.Now(), Message: "gateway.error on"}}})
		if !b.Server.faultSwitches().currentFaults().Gateway.Error {
			t.Fatal("B published the event before it had the room it describes")
		}
	})

	t.Run("a server whose listener is cut reconnects and catches up", func(t *testing.T) {
		class.postgresOnly(t)
		a, _, c, all := each(t)
		conn, err := pgx.Connect(t.Context(), class.url)
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
			WHERE datname = current_database() AND query = 'LISTEN "paytwice_room"'`).Scan(&cut); err != nil || cut < len(all) {
			t.Fatalf("%d room listeners cut, want at least %d (%v)", cut, len(all), err)
		}
		for _, s := range all {
			waitUntil(t, "the reload on "+s.Server.cfg.Name, func() bool { return s.faults().Server.DelayMS == 1234 })
		}
		// And they listen again.
		c.must(http.MethodPatch, "/api/faults", `{"gateway":{"decline":true}}`)
		waitUntil(t, "the next change on A", func() bool { return a.faults().Gateway.Decline })
	})
}

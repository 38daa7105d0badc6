package web

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"paytwice/pay"
	"paytwice/web/live"
)

func TestReset(t *testing.T) {
	t.Parallel()
	env := newFIEnv(t, Config{})
	body := `{"order_id":"R-1","amount_satang":1000}`
	first := env.mustPay("reset-1", body)
	env.setFaults(`{"server":{"crash_midway":true},"gateway":{"latency_ms":5},"random":{"enabled":true,"seed":1,"probability":1}}`)
	env.mustDrop("reset-2", `{"order_id":"R-2","amount_satang":1000}`)
	env.must(http.MethodPost, "/api/clock/advance", `{"seconds":3600}`)

	r := env.must(http.MethodPost, "/api/reset", "")
	if r.Status != http.StatusOK {
		t.Fatalf("reset: %d %s", r.Status, r.Body)
	}
	t.Run("keys, charges and the gateway's memory are gone", func(t *testing.T) {
		started, done, err := env.DB.KeyCounts(t.Context())
		gw, _ := env.DB.CountGatewayCharges(t.Context())
		if err != nil || started+done != 0 || env.charges() != 0 || gw != 0 {
			t.Fatalf("%d started, %d done, %d charges, %d gateway charges", started, done, env.charges(), gw)
		}
	})
	t.Run("every switch is off and the clock is back", func(t *testing.T) {
		if f := getFaults(t, env); f != (pay.Faults{}) {
			t.Fatalf("switches %+v", f)
		}
		if off := env.Server.clock.Offset(); off != 0 {
			t.Fatalf("clock offset %s", off)
		}
	})
	t.Run("the timeline holds only the reset", func(t *testing.T) {
		events := env.Server.hub.Recent(100)
		if len(events) != 1 || events[0].Kind != live.Reset {
			t.Fatalf("events after reset: %d, first %+v", len(events), events[0].Event)
		}
	})
	t.Run("an old key is a new payment again: it is charged, not replayed", func(t *testing.T) {
		r := env.mustPay("reset-1", body)
		if r.Status != http.StatusCreated || isReplay(r) || string(r.Body) == string(first.Body) {
			t.Fatalf("got %d replayed=%v %s", r.Status, isReplay(r), r.Body)
		}
	})
}

func TestClockAdvance(t *testing.T) {
	t.Parallel()
	t.Run("advancing the clock ages keys and says how far ahead it runs", func(t *testing.T) {
		env := newFIEnv(t, Config{})
		env.setFaults(`{"server":{"crash_midway":true}}`)
		env.mustDrop("clock-1", `{"order_id":"K-1","amount_satang":100}`)
		r := env.must(http.MethodPost, "/api/clock/advance", `{"seconds":31}`)
		var st ClockState
		if err := json.Unmarshal(r.Body, &st); err != nil || r.Status != 200 || st.OffsetSeconds != 31 {
			t.Fatalf("advance: %d %s", r.Status, r.Body)
		}
		rep := env.sweepNow()
		if len(rep.Closed) != 1 || rep.Closed[0].Key != "clock-1" {
			t.Fatalf("after 31 s the 30 s lock timeout should have passed: %+v", rep)
		}
		k, _ := env.DB.GetKey(t.Context(), AnonymousScope, "clock-1")
		if k.Status != pay.StatusDone {
			t.Fatalf("key %+v", k)
		}
		var published bool
		for _, e := range env.Server.hub.Recent(50) {
			published = published || (e.Kind == live.Switched && strings.Contains(e.Message, "clock advanced by 31s"))
		}
		if !published {
			t.Fatal("the jump was not published")
		}
	})
	for _, body := range []string{`{"seconds":0}`, `{"seconds":-5}`, `{"seconds":604801}`, `{"seconds":1.5}`, `{"seconds":"60"}`, `{}`, `{"minutes":1}`} {
		t.Run("the body "+body+" is refused with 400", func(t *testing.T) {
			env := newFIEnv(t, Config{})
			r := env.must(http.MethodPost, "/api/clock/advance", body)
			if r.Status != http.StatusBadRequest || problemSlug(t, r) != "invalid-request" {
				t.Fatalf("got %d %s", r.Status, r.Body)
			}
			if env.Server.clock.Offset() != 0 {
				t.Fatal("the clock moved")
			}
		})
	}
	t.Run("a week is the most one step may jump", func(t *testing.T) {
		env := newFIEnv(t, Config{})
		r := env.must(http.MethodPost, "/api/clock/advance", `{"seconds":604800}`)
		if r.Status != 200 || env.Server.clock.Offset() != 7*24*time.Hour {
			t.Fatalf("got %d %s", r.Status, r.Body)
		}
	})
}

func TestSweepEndpointReportsNothingWhenNothingIsStuck(t *testing.T) {
	t.Parallel()
	env := newFIEnv(t, Config{})
	r := env.must(http.MethodPost, "/api/sweep", "")
	if r.Status != 200 || strings.TrimSpace(string(r.Body)) != `{"lock_timeout_seconds":30,"closed":[],"closed_in_room":0}` {
		t.Fatalf("got %d %s", r.Status, r.Body)
	}
}

func TestChangedByNamesThePage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, referer, want string }{
		{"curl sends no Referer", "", "JSON API"},
		{"a board button", "http://class.test/board", "the board"},
		{"a switch on the checkout page", "http://class.test/?lesson=no-key", "the checkout page"},
		{"another site's page", "http://elsewhere.test/board", "JSON API"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPut, "http://class.test/api/step", nil)
			if tc.referer != "" {
				r.Header.Set("Referer", tc.referer)
			}
			if got := changedBy(r); got != tc.want {
				t.Fatalf("changedBy: %q, want %q", got, tc.want)
			}
		})
	}
}

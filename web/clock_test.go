package web

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"paytwice/pay"
	"paytwice/sim"
	"paytwice/web/room"
)

// The clock may run at most sim.MaxOffset ahead in total. Unbounded, about
// 15,000 one-week steps wrapped it to the 18th century, where a key
// started before never grows old enough to sweep.
func TestClockAdvanceIsBoundedInTotal(t *testing.T) {
	t.Parallel()
	env := newFIEnv(t, Config{})
	env.setFaults(`{"server":{"crash_midway":true}}`)
	env.mustDrop("bound-1", `{"order_id":"K-1","amount_satang":100}`)
	start := env.Server.clock.Now()

	week := int64(room.MaxClockAdvance / time.Second)
	steps := int(sim.MaxOffset / room.MaxClockAdvance) // whole weeks that fit
	for i := range steps {
		if r := env.must(http.MethodPost, "/api/clock/advance", fmt.Sprintf(`{"seconds":%d}`, week)); r.Status != http.StatusOK {
			t.Fatalf("step %d: %d %s", i, r.Status, r.Body)
		}
	}
	left := int64((sim.MaxOffset - time.Duration(steps)*room.MaxClockAdvance) / time.Second)
	if left > 0 {
		if r := env.must(http.MethodPost, "/api/clock/advance", fmt.Sprintf(`{"seconds":%d}`, left)); r.Status != http.StatusOK {
			t.Fatalf("the last %d s up to the bound: %d %s", left, r.Status, r.Body)
		}
	}
	if env.Server.clock.Offset() != sim.MaxOffset {
		t.Fatalf("offset %s, want %s", env.Server.clock.Offset(), sim.MaxOffset)
	}

	// One second more is a 400 that says the bound, and the clock stays.
	for _, body := range []string{`{"seconds":1}`, fmt.Sprintf(`{"seconds":%d}`, week)} {
		r := env.must(http.MethodPost, "/api/clock/advance", body)
		if r.Status != http.StatusBadRequest || problemSlug(t, r) != "invalid-request" {
			t.Fatalf("%s past the bound: %d %s", body, r.Status, r.Body)
		}
		var p Problem
		_ = json.Unmarshal(r.Body, &p)
		if !strings.Contains(p.Detail, fmt.Sprint(int64(sim.MaxOffset/time.Second))) || !strings.Contains(p.Detail, "reset") {
			t.Fatalf("the problem does not say the bound: %q", p.Detail)
		}
	}
	if now := env.Server.clock.Now(); env.Server.clock.Offset() != sim.MaxOffset || !now.After(start) {
		t.Fatalf("the clock moved or wrapped: offset %s, now %s", env.Server.clock.Offset(), now)
	}

	// The key started before the jumps is old, not young: the sweeper closes it.
	rep := env.sweepNow()
	if len(rep.Closed) != 1 || rep.Closed[0].Key != "bound-1" {
		t.Fatalf("the sweep after the jumps: %+v", rep)
	}
	if k, _ := env.DB.GetKey(t.Context(), AnonymousScope, "bound-1"); k.Status != pay.StatusDone {
		t.Fatalf("key %+v", k)
	}
}

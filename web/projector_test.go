package web

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"paytwice/pay"
	"paytwice/views"
	"paytwice/web/board"
)

// waitProjector waits until the projector has drawn every event published.
func waitProjector(t testing.TB, env *testEnv) *board.Board {
	t.Helper()
	p := env.Server.live()
	waitUntil(t, "the board to catch up", func() bool { return p.Caught(env.Server.hub.LastSeq()) })
	return p
}

func TestProjector(t *testing.T) {
	t.Parallel()
	t.Run("the page state follows the payments: a key row, a charge, the counters", func(t *testing.T) {
		env := newTestEnv(t, Config{})
		env.Server.live()
		env.pay("k-1", `{"order_id":"A-1","amount_satang":100}`)
		env.pay("k-1", `{"order_id":"A-1","amount_satang":100}`) // replay
		env.pay("k-1", `{"order_id":"A-1","amount_satang":999}`) // 422
		l := waitProjector(t, env).Snapshot()
		if len(l.Keys) != 1 || l.Keys[0].Status != "done" || l.Keys[0].Code != 201 || l.Keys[0].Hits != 2 {
			t.Errorf("keys %+v", l.Keys)
		}
		if len(l.Charges) != 1 || l.Charges[0].OrderID != "A-1" || !strings.HasPrefix(l.Charges[0].Charge, "ch_") {
			t.Errorf("charges %+v", l.Charges)
		}
		c := l.Counters
		if c.Requests != 3 || c.Charges != 1 || c.Replays != 1 || c.Mismatches != 1 || c.Twice != 0 {
			t.Errorf("counters %+v", c)
		}
		if len(l.Timeline) != 3 || l.Timeline[0].Outcome.Text != "422 key reused" || l.Timeline[1].Outcome.Text != "201 replayed" || l.Timeline[2].Outcome.Text != "201 paid" {
			t.Errorf("timeline outcomes: %v", outcomes(l.Timeline))
		}
	})

	t.Run("a lost response replaces the arrow back to the browser", func(t *testing.T) {
		env := newTestEnv(t, Config{})
		env.Server.live()
		setFaults(t, env, pay.ServerFaults{ResponseLost: true})
		_, _ = env.tryPay("k-1", `{"order_id":"A-1","amount_satang":100}`)
		l := waitProjector(t, env).Snapshot()
		row := l.Timeline[0]
		last := row.Steps[len(row.Steps)-1]
		if !last.Lost || last.Badge.Text != "lost response" || row.Outcome.Text != "response lost" {
			t.Fatalf("last step %+v, outcome %+v", last, row.Outcome)
		}
		for _, s := range row.Steps[:len(row.Steps)-1] {
			if s.ID == last.ID {
				t.Fatal("the 201 arrow is still there beside the lost one")
			}
		}
	})

	t.Run("a look-up by order is an event: the timeline shows it and the lab counts it at once", func(t *testing.T) {
		env := newTestEnv(t, Config{})
		env.Server.live()
		env.pay("k-1", `{"order_id":"A-1","amount_satang":100}`)
		before, err := env.Server.lab.outcomes(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if r := env.get("/v1/payments?order_id=A-1"); r.Status != 200 {
			t.Fatalf("look-up: %d", r.Status)
		}
		l := waitProjector(t, env).Snapshot()
		if l.Timeline[0].Title != "Look-up" || l.Timeline[0].Outcome.Text != "found paid" {
			t.Fatalf("timeline: %v", outcomes(l.Timeline))
		}
		after, err := env.Server.lab.outcomes(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if after.NewKeyAfter500.Reconciliations != before.NewKeyAfter500.Reconciliations+1 || after.Seq == before.Seq {
			t.Fatalf("the lab's look-ups went from %d to %d (seq %d to %d)", before.NewKeyAfter500.Reconciliations,
				after.NewKeyAfter500.Reconciliations, before.Seq, after.Seq)
		}
	})

	t.Run("a reset clears every panel in one frame", func(t *testing.T) {
		env := newTestEnv(t, Config{})
		env.Server.live()
		env.pay("k-1", `{"order_id":"A-1","amount_satang":100}`)
		if err := env.Server.demoReset().run(t.Context(), "test"); err != nil {
			t.Fatal(err)
		}
		p := waitProjector(t, env)
		l := p.Snapshot()
		if len(l.Keys) != 0 || len(l.Charges) != 0 || l.Counters.Requests != 0 || len(l.Timeline) != 1 || l.Timeline[0].Title != "Reset" {
			t.Fatalf("after reset: %d keys, %d charges, %+v, %v", len(l.Keys), len(l.Charges), l.Counters, outcomes(l.Timeline))
		}
	})
}

func outcomes(rows []views.TimelineRow) []string {
	var out []string
	for _, r := range rows {
		out = append(out, fmt.Sprintf("%s=%s", r.Title, r.Outcome.Text))
	}
	return out
}

// TestOrdersListSaysHowManyMore: with more orders than the board lists, it
// says how many it leaves out, so a student who does not find theirs
// knows why.
func TestOrdersListSaysHowManyMore(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, Config{})
	for i := range board.OrdersListed + 3 {
		if r := env.pay(fmt.Sprintf("more-%d", i), fmt.Sprintf(`{"order_id":"M-%d","amount_satang":100}`, i)); r.Status != http.StatusCreated {
			t.Fatalf("pay: %d", r.Status)
		}
	}
	c := waitProjector(t, env).Snapshot().Counters
	if len(c.Orders) != board.OrdersListed || c.MoreOrders != 3 {
		t.Fatalf("%d orders listed, %d more, want %d and 3", len(c.Orders), c.MoreOrders, board.OrdersListed)
	}
	if body := string(env.get("/board").Body); !strings.Contains(body, "and 3 orders more, charged once") {
		t.Fatal("the board does not say how many orders it leaves out")
	}
}

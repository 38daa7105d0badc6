package web

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"paytwice/sim"
	"paytwice/web/live"
	"paytwice/web/room"
	"paytwice/web/room/step"
)

// heldOn turns step mode on for env, with holds that end only when the
// test lets them go (no time limit), and returns a view of its events for
// waitHeld.
func heldOn(t *testing.T, env *testEnv) *stepEnv {
	t.Helper()
	st := env.Server.payments.steps
	st.After = func(time.Duration) <-chan time.Time { return nil }
	e := &stepEnv{testEnv: env, sub: env.Server.hub.Subscribe(env.Server.hub.LastSeq())}
	st.Turn(true, "test")
	return e
}

// holdAt lets env's held request go on from checkpoint to checkpoint
// until it is held at cp.
func (e *stepEnv) holdAt(cp step.Checkpoint) {
	e.t.Helper()
	for c := step.CheckReceived; c < cp; c++ {
		if c == step.CheckLooked {
			continue // the lab's mistakes stop there; the protocol does not
		}
		e.waitHeld(c.String())
		if _, err := e.Server.payments.steps.Next("", false); err != nil {
			e.t.Fatal(err)
		}
	}
	e.waitHeld(cp.String())
}

// resetOn sends POST /api/reset to env in the background.
func resetOn(env *testEnv) <-chan response {
	out := make(chan response, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, env.URL+"/api/reset", nil)
		r, err := do(req)
		if err != nil {
			r = response{Status: -1, Body: []byte(err.Error())}
		}
		out <- r
	}()
	return out
}

// answerOf waits for an answer, within a bound.
func answerOf(t *testing.T, what string, ch <-chan response) response {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(20 * time.Second):
		t.Fatalf("no answer to %s", what)
	}
	return response{}
}

// resetMessage is the message of the Reset event on env's timeline.
func resetMessage(t *testing.T, env *testEnv) string {
	t.Helper()
	for _, e := range env.Server.hub.Recent(live.DefaultSize) {
		if e.Kind == live.Reset {
			return e.Message
		}
	}
	t.Fatal("no Reset event")
	return ""
}

// A reset on one server waits for the payments in flight on the others:
// a payment held between its gateway charge and its save on s2 finishes
// before s1 empties the tables, so the books still balance.
func TestResetOnOneServerWaitsForAPaymentInFlightOnAnother(t *testing.T) {
	db := newClass(t)
	// The gateway's time-out is generous: the payment must reach the
	// gateway on a loaded machine before it is held; the reset does not
	// wait that long, since s2 answers.
	cfg := Config{GatewayTimeout: 5 * time.Second, Name: "s1"}
	a := db.server(cfg, nil)
	cfg.Name = "s2"
	b := db.server(cfg, nil)
	held := heldOn(t, b)
	ans := held.payAsync("in-flight", "A-1")
	held.holdAt(step.CheckGatewayAnswered)
	if local, gateway := db.books(); local != 0 || gateway != 1 {
		t.Fatalf("held after the gateway: %d local charges, %d at the gateway", local, gateway)
	}

	if r := answerOf(t, "the reset", resetOn(a)); r.Status != http.StatusOK {
		t.Fatalf("reset: %d %s", r.Status, r.Body)
	}
	b.Server.payments.steps.Play() // had the reset not let it go
	if r := answerOf(t, "the payment", ans); r.Status != http.StatusCreated {
		t.Fatalf("payment: %d %s", r.Status, r.Body)
	}
	if local, gateway := db.books(); local != gateway {
		t.Fatalf("after the reset: %d local charges, %d at the gateway", local, gateway)
	}
	if m := resetMessage(t, a); strings.Contains(m, "not waited for") {
		t.Errorf("the reset says %q", m)
	}
	// Every server admits payments again.
	for _, env := range []*testEnv{a, b} {
		if r := env.pay("after-"+env.Server.cfg.Name, `{"order_id":"A-2","amount_satang":100}`); r.Status != http.StatusCreated {
			t.Fatalf("payment after the reset on %s: %d %s", env.Server.cfg.Name, r.Status, r.Body)
		}
	}
}

// roomDeaf is a server's peers whose room follower never listens: the
// server's listening connection is down for good.
type roomDeaf struct{ room.Peers }

func (roomDeaf) ListenRoom(ctx context.Context, _ string, _ func(), _ func(string)) error {
	<-ctx.Done()
	return ctx.Err()
}

// A reset never waits past its bound: not for a server that died or whose
// listening connection is down (it cannot answer, and PostgreSQL no
// longer lists it), and not for long for one that follows the room but
// never answers; the others are let go all the same.
func TestResetDoesNotWaitForServersThatCannotAnswer(t *testing.T) {
	waitsOnRealClocks(t)
	// The gateway's time-out is generous: the reset's bound (AckWait) is
	// the gateway's time-out and a margin, and s2 must answer within it,
	// and its payment after the reset reach the gateway within the
	// time-out, on a loaded machine. With 300 ms, the bound was 2.3 s.
	cfg := Config{GatewayTimeout: 5 * time.Second}
	t.Run("a server that died or stopped listening is not waited for", func(t *testing.T) {
		db := newClass(t)
		cfg.Name = "s1"
		a := db.server(cfg, nil)
		cfg.Name = "s2"
		dead := db.server(cfg, nil)
		cfg.Name = "s3"
		db.server(cfg, func(p room.Peers) room.Peers { return roomDeaf{p} })
		dead.Server.Close()
		waitUntil(t, "s2's listening connection to end", func() bool {
			m, err := db.RoomMembers(context.Background())
			return err == nil && len(m) == 1
		})
		if r := answerOf(t, "the reset", resetOn(a)); r.Status != http.StatusOK {
			t.Fatalf("reset: %d %s", r.Status, r.Body)
		}
		if m := resetMessage(t, a); strings.Contains(m, "not waited for") {
			t.Errorf("the reset says %q: it waited for a server that cannot answer", m)
		}
	})
	t.Run("a server that follows the room but never answers is waited for within the bound", func(t *testing.T) {
		db := newPostgresClass(t)
		cfg.Name = "s1"
		a := db.server(cfg, nil)
		cfg.Name = "s2"
		b := db.server(cfg, nil)
		// A member that listens and never answers: a server hung, or a
		// machine gone whose connection PostgreSQL has not closed yet.
		conf := db.pg.Pool().Config().ConnConfig.Copy()
		conf.RuntimeParams["application_name"] = "paytwice-room 0123456789abcdef s9"
		hung, err := pgx.ConnectConfig(context.Background(), conf)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { hung.Close(context.Background()) })
		if _, err := hung.Exec(context.Background(), `LISTEN paytwice_room`); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if r := answerOf(t, "the reset", resetOn(a)); r.Status != http.StatusOK {
			t.Fatalf("reset: %d %s", r.Status, r.Body)
		}
		if took := time.Since(start); took < a.Server.servers.barriers.AckWait {
			t.Errorf("the reset went on after %s, before its bound of %s", took, a.Server.servers.barriers.AckWait)
		}
		if m := resetMessage(t, a); !strings.Contains(m, "not waited for: s9") || strings.Contains(m, "s2") {
			t.Errorf("the reset says %q; want s9, and only s9, named as not waited for", m)
		}
		// s2 answered, held its payments until the end, and goes on.
		waitUntil(t, "s2 to see the reset end", func() bool { return b.Server.room.Load().Barrier == nil })
		if r := b.pay("after", `{"order_id":"A-2","amount_satang":100}`); r.Status != http.StatusCreated {
			t.Fatalf("payment on s2 after the reset: %d %s", r.Status, r.Body)
		}
	})
}

// A server holds its payments for another server's reset only until the
// barrier's time is up: a resetting server that died holds nobody for
// longer. The bound is on s2's barrier clock, which only the test moves,
// so however slowly s2 hears of the barrier its time is not up.
func TestAServerHoldsItsPaymentsForAResetOnlyUntilItsBound(t *testing.T) {
	waitsOnRealClocks(t)
	db := newClass(t)
	clock := sim.NewManualClock(time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC))
	b := db.server(Config{Name: "s2", BarrierClock: clock.Now}, nil)
	until := clock.Now().Add(3 * time.Second)
	// A barrier by a server that is gone.
	if _, _, err := db.UpdateRoom(context.Background(), func(old []byte) ([]byte, error) {
		st := room.Defaults()
		if err := json.Unmarshal(old, &st); err != nil {
			return nil, err
		}
		st.ResetGen++
		st.Barrier = &room.Barrier{Gen: st.ResetGen, By: "gone", ByName: "s1", Until: until}
		return json.Marshal(st)
	}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "s2 to acknowledge the barrier", func() bool {
		bar := b.Server.room.Load().Barrier
		return bar != nil && slices.Contains(bar.Acks, b.Server.room.ID())
	})
	// s2 acknowledges holding its in-flight lock, which every payment
	// takes shared: it admits none now.
	if b.Server.payments.inflight.TryRLock() {
		b.Server.payments.inflight.RUnlock()
		t.Fatal("s2 acknowledged the barrier without holding its payments")
	}
	type answer struct {
		r     response
		err   error
		early bool // answered before the bound was passed
	}
	var passed atomic.Bool
	paid := make(chan answer, 1)
	go func() {
		r, err := b.tryPay("held-back", `{"order_id":"A-1","amount_satang":100}`)
		paid <- answer{r, err, !passed.Load()}
	}()
	passed.Store(true)
	clock.Advance(3 * time.Second)
	var a answer
	select {
	case a = <-paid:
	case <-time.After(20 * time.Second):
		t.Fatal("the payment is still held after the barrier's bound: s2 holds it until the barrier ends")
	}
	if a.err != nil {
		t.Fatal(a.err)
	}
	if a.early {
		t.Fatal("a payment ran while the server held its payments for a reset")
	}
	if a.r.Status != http.StatusCreated {
		t.Fatalf("payment: %d %s", a.r.Status, a.r.Body)
	}
	if b.Server.room.Load().Barrier == nil {
		t.Fatal("the barrier ended: the payment went on because of that, not the bound")
	}
}

// Resets sent to two servers at once run one after the other, and both
// complete.
func TestResetsOnTwoServersAtOnce(t *testing.T) {
	t.Parallel()
	envs, db := classServers(t, "s1", "s2")
	envs[0].pay("k1", `{"order_id":"A-1","amount_satang":100}`)
	first, second := resetOn(envs[0]), resetOn(envs[1])
	for _, ch := range []<-chan response{first, second} {
		if r := answerOf(t, "a reset", ch); r.Status != http.StatusOK {
			t.Fatalf("reset: %d %s", r.Status, r.Body)
		}
	}
	if local, gateway := db.books(); local != 0 || gateway != 0 {
		t.Fatalf("after the resets: %d local charges, %d at the gateway", local, gateway)
	}
	// The last reset's end reaches the other server with the room's
	// notification, after that reset has answered.
	for _, env := range envs {
		waitUntil(t, env.Server.cfg.Name+" to see the barrier end", func() bool { return env.Server.room.Load().Barrier == nil })
	}
}

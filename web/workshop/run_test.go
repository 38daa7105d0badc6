package workshop

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"paytwice/pay"
	"paytwice/pay/check"
)

// TestRunFinishSaysWhatHappened: a run cut by the server stopping says
// so rather than blaming the time limit, and a history with no legal
// order is counted as a case, so a row never shows more failed than
// cases.
func TestRunFinishSaysWhatHappened(t *testing.T) {
	cut := context.Canceled
	t.Run("the server stopped", func(t *testing.T) {
		r := Run{State: Running, Done: 3, Passed: 3}
		r.finish(nil, cut, true, true, 3*time.Minute)
		if r.State != NotRun || !strings.Contains(r.Message, "server stopped") || strings.Contains(r.Message, "longer") {
			t.Fatalf("%+v, want a run not run because the server stopped", r)
		}
	})
	t.Run("the run overran", func(t *testing.T) {
		r := Run{State: Running}
		r.finish(nil, context.DeadlineExceeded, false, true, 3*time.Minute)
		if r.State != NotRun || !strings.Contains(r.Message, "longer than the 3m0s") {
			t.Fatalf("%+v, want the time limit named", r)
		}
	})
	t.Run("unreachable, even as the server stops", func(t *testing.T) {
		r := Run{State: Running}
		r.finish(nil, errors.Join(check.ErrUnreachable, errors.New("dial refused")), true, false, time.Minute)
		if r.State != NotRun || !strings.Contains(r.Message, "could not test") {
			t.Fatalf("%+v", r)
		}
	})
	t.Run("a linearizability violation is a failed case", func(t *testing.T) {
		r := Run{State: Running, Done: 2, Passed: 2}
		rep := &check.Report{}
		rep.Linearizability.Result = "violation"
		rep.Linearizability.Groups = []string{"pay-1"}
		r.finish(rep, nil, false, false, time.Minute)
		if r.State != Done || r.Done != 3 || r.Failed != 1 || r.Passed != 2 || r.Failed > r.Done || r.FirstSafety == "" {
			t.Fatalf("%+v, want 3 cases, 2 passed, 1 failed with its reason", r)
		}
	})
}

// TestGatewayAtOnce: a student's gateway answers at most MaxGatewayAtOnce
// requests from outside at once, and takes more as answers go.
func TestGatewayAtOnce(t *testing.T) {
	w := New(Config{Guard: NewGuard(Nets()), Now: time.Now})
	st := &student{secret: "s3cr3t", gw: nil}
	w.bySecret[st.secret] = st
	if _, _, err := w.EnterGateway("guessed"); pay.ErrorCode(err) != pay.ENOTFOUND {
		t.Fatalf("an unknown secret: %v, want not found", err)
	}
	var leaves []func()
	for range MaxGatewayAtOnce {
		_, leave, err := w.EnterGateway(st.secret)
		if err != nil {
			t.Fatal(err)
		}
		leaves = append(leaves, leave)
	}
	if _, _, err := w.EnterGateway(st.secret); pay.ErrorCode(err) != pay.EBUSY {
		t.Fatalf("one past the bound: %v, want busy", err)
	}
	leaves[0]()
	if _, _, err := w.EnterGateway(st.secret); err != nil {
		t.Fatalf("after one answer: %v", err)
	}
	if !w.Known(st.secret) || w.Known("guessed") {
		t.Fatal("Known is wrong")
	}
}

// TestQueueFairness: the presenter's runs go ahead of the class's, one
// address holds at most PerAddress places in the queue, and registers at
// most PerAddress students, a student who registers again counting once.
func TestQueueFairness(t *testing.T) {
	ctx := context.Background()
	w := New(Config{Guard: NewGuard(Nets(netip.MustParsePrefix("127.0.0.2/32"))), Queue: 10, PerAddress: 3})
	w.SetOn(true)
	register := func(who, addr string) error {
		_, err := w.Register(ctx, who, addr, "n"+who, "http://127.0.0.2:8000")
		return err
	}
	for _, who := range []string{"a", "b", "c"} {
		if err := register(who, "10.0.0.1"); err != nil {
			t.Fatal(err)
		}
	}
	if err := register("a", "10.0.0.1"); err != nil {
		t.Fatalf("a student registering again: %v", err)
	}
	if err := register("d", "10.0.0.1"); pay.ErrorCode(err) != pay.EBUSY {
		t.Fatalf("a fourth student from one address: %v, want busy", err)
	}
	for _, who := range []string{"p", "q"} {
		if err := register(who, "10.0.0.9"); err != nil {
			t.Fatal(err)
		}
	}
	for _, who := range []string{"a", "b", "c"} {
		if _, err := w.Ask(who, false); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Ask("a", false); pay.ErrorCode(err) != pay.ECONFLICT {
		t.Fatalf("a second run for one student: %v, want conflict", err)
	}
	if _, err := w.Ask("p", true); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Ask("q", true); err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, st := range w.queue {
		order = append(order, st.who)
	}
	if strings.Join(order, " ") != "p q a b c" {
		t.Fatalf("queue %v, want the presenter's runs first, in the order asked", order)
	}
	w2 := New(Config{Guard: NewGuard(Nets(netip.MustParsePrefix("127.0.0.2/32"))), Queue: 10, PerAddress: 2, MaxStudents: 10})
	w2.SetOn(true)
	for _, who := range []string{"x", "y"} {
		if _, err := w2.Register(ctx, who, "10.0.0.1", "n"+who, "http://127.0.0.2:8000"); err != nil {
			t.Fatal(err)
		}
		if _, err := w2.Ask(who, false); err != nil {
			t.Fatal(err)
		}
	}
	// A third student from that address, registered while it had room
	// (from another address), waits for a place.
	if _, err := w2.Register(ctx, "z", "10.0.0.2", "nz", "http://127.0.0.2:8000"); err != nil {
		t.Fatal(err)
	}
	w2.students["z"].addr = "10.0.0.1"
	if _, err := w2.Ask("z", false); pay.ErrorCode(err) != pay.EBUSY {
		t.Fatalf("a third queued run from one address: %v, want busy", err)
	}
	if _, err := w2.Ask("z", true); err != nil {
		t.Fatalf("the presenter's run is not bounded by the address: %v", err)
	}
	if DefaultPerAddress < 30 {
		t.Fatalf("DefaultPerAddress %d is smaller than a class", DefaultPerAddress)
	}
}

// TestRunFinishQuotesNoAnswerOfANonPaymentTarget: an address that is no
// payment endpoint gets its failure named, with nothing it answered.
func TestRunFinishQuotesNoAnswerOfANonPaymentTarget(t *testing.T) {
	for _, err := range []error{
		fmt.Errorf("%w: POST http://10.0.0.5/admin answered a first good payment (body {}) with 200 OK: secret-token=abc123; see -body and -H", check.ErrNotAccepted),
		fmt.Errorf("%w: POST http://10.0.0.5/admin was reached, but gave no answer to a first good payment: secret-token=abc123", check.ErrNotAccepted),
	} {
		r := Run{State: Running}
		r.finish(nil, err, false, false, time.Minute)
		if r.State != NotRun || strings.Contains(r.Message, "secret-token") || !strings.Contains(r.Message, "first good payment") {
			t.Fatalf("%q, want the kind of failure and nothing the target answered", r.Message)
		}
	}
}

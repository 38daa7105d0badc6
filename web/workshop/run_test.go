package workshop

import (
	"context"
	"errors"
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

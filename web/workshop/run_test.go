package workshop

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

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

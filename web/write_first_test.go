package web

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"paytwice/web/room"
)

// TestThePresentersPaymentWritesFirstInEveryLabMode: every write of the
// presenter's payment goes before the writes queued at the store's writer
// (pay.WriteFirst), in the real protocol and in each of the lab's modes,
// whose work runs under the server's work context rather than the
// request's. Only the protocol's claim did: its charge at the gateway's
// ledger and its saved answer, and every write of the lab's modes,
// queued behind a class flooding the writer, and a presenter's payment
// went unanswered for 20 s (TestMischievousClass at load 18-24). A
// student's payment is the control: its writes queue.
func TestThePresentersPaymentWritesFirstInEveryLabMode(t *testing.T) {
	const token = "front-of-the-room"
	env := newTestEnv(t, Config{PresenterToken: token})
	presenter, student := fromAddress("127.0.0.1"), fromAddress("127.0.0.2")
	// queued counts the writes the store's writer ran after those queued
	// before them.
	queued := func() int64 {
		s := env.DB.WriterStats()
		return s.Ops - s.First
	}
	for i, mode := range []room.LabMode{room.LabCorrect, room.LabNoKey, room.LabCheckThenInsert,
		room.LabCheckThenInsertConstrained, room.LabKeyTableOnly, room.LabMemoryLock} {
		t.Run(mode, func(t *testing.T) {
			settings, _ := json.Marshal(room.LabSettings{Server: room.LabServer{Mode: mode}})
			if r := sendFrom(t, presenter, http.MethodPut, env.URL+"/api/lab", string(settings), PresenterHeader, token); r.Status != http.StatusOK {
				t.Fatalf("the lab's mode: %d %s", r.Status, r.Body)
			}
			// The server keeps its answer counts with a write of its own
			// (answerCounts.keep, every second while they change), which
			// queues as it should: saved before each try, and a try it
			// falls into is made again, twice at most.
			var wrote int64
			var tries []int64
			for try := range 3 {
				env.Server.pages.answers.save(context.Background())
				before, firstBefore := queued(), env.DB.WriterStats().First
				order := fmt.Sprintf("PR%d%dX", i, try)
				if r := payFrom(t, presenter, env.URL, "presenter-"+order, order, "Bearer presenter", PresenterHeader, token); r.Status != http.StatusCreated {
					t.Fatalf("the presenter's payment: %d %s%s", r.Status, r.Body, noAnswer(r))
				}
				wrote = queued() - before
				tries = append(tries, wrote)
				if env.DB.WriterStats().First == firstBefore {
					t.Fatal("none of the presenter's writes went first")
				}
				if wrote == 0 {
					break
				}
			}
			if wrote != 0 {
				t.Errorf("the presenter's writes waited for the writes queued before them, in each of its payments: %v writes", tries)
			}
			before := queued()
			order := fmt.Sprintf("S%dX", i)
			if r := payFrom(t, student, env.URL, "student-"+order, order, "Bearer student"); r.Status != http.StatusCreated {
				t.Fatalf("the student's payment: %d %s%s", r.Status, r.Body, noAnswer(r))
			}
			if queued() == before {
				t.Error("none of the student's writes queued: the test cannot tell the presenter's apart")
			}
		})
	}
}

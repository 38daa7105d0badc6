package main

import (
	"context"
	"io"
	"log"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"paytwice/sim"
	"paytwice/store"
	"paytwice/web"
)

// "paytwice check -presenter-token" against a class server is admitted
// as the presenter: its storms of one key are not held to a student's
// share of the payments at work, which would refuse them 429.
func TestCheckWithThePresenterTokenIsNotHeldToAStudentsShare(t *testing.T) {
	const token = "front-of-the-room"
	clock := sim.NewClock(time.Now)
	db, err := store.Open(filepath.Join(t.TempDir(), "paytwice.db"), store.Options{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	srv := web.NewServer(web.Config{Ledger: db, PresenterToken: token, LockTimeout: time.Second, SweepEvery: 500 * time.Millisecond,
		Logger: log.New(io.Discard, "", 0), Limits: web.Limits{PaymentsPerAddress: 1, PaymentsAtWork: 1, PaymentsQueued: 1, PaymentWait: time.Millisecond}}, db, clock)
	hs := httptest.NewServer(srv.Handler())
	ctx, cancel := context.WithCancel(context.Background())
	jobs := make(chan struct{})
	go func() { defer close(jobs); srv.RunJobs(ctx) }()
	t.Cleanup(func() { cancel(); <-jobs; hs.Close(); srv.Close(); db.Close() })

	out, _, err := runCmd(t, "check", "-presenter-token", token, "-cases", "4", hs.URL+"/v1/payments")
	if err != nil || !strings.Contains(out, " 0 FAIL, ") || strings.Contains(out, "429") {
		t.Fatalf("check with the presenter token: %v\n%s", err, out)
	}
}

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

const classToken = "front-of-the-room"

// classServer is a class server (a presenter token set) that lets one
// address have a single payment at work, and refuses the next at once.
// Its lock timeout bounds a payment's work to half of it: a second for
// the check, whose cases may wait for the sweeper to close a key; minutes
// for the bench, which waits for none and counts every status (on a
// loaded machine a payment's work outlasted half a second: 504 ×3 among
// 200).
func classServer(t *testing.T, lockTimeout time.Duration) string {
	t.Helper()
	token := classToken
	clock := sim.NewClock(time.Now)
	db, err := store.Open(filepath.Join(t.TempDir(), "paytwice.db"), store.Options{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	srv := web.NewServer(web.Config{Ledger: db, PresenterToken: token, LockTimeout: lockTimeout, SweepEvery: 500 * time.Millisecond,
		Logger: log.New(io.Discard, "", 0), Limits: web.Limits{PaymentsPerAddress: 1, PaymentsAtWork: 1, PaymentsQueued: 1, PaymentWait: time.Millisecond}}, db, clock)
	hs := httptest.NewServer(srv.Handler())
	ctx, cancel := context.WithCancel(context.Background())
	jobs := make(chan struct{})
	go func() { defer close(jobs); srv.Jobs().Run(ctx) }()
	t.Cleanup(func() { cancel(); <-jobs; hs.Close(); srv.Close(); db.Close() })
	return hs.URL
}

// "paytwice check -presenter-token" against a class server is admitted
// as the presenter: its storms of one key are not held to a student's
// share of the payments at work, which would refuse them 429.
func TestCheckWithThePresenterTokenIsNotHeldToAStudentsShare(t *testing.T) {
	url := classServer(t, time.Second)
	out, _, err := runCmd(t, "check", "-presenter-token", classToken, "-cases", "4", url+"/v1/payments")
	// "×429" is the check's count of 429 answers; a bare "429" could be
	// part of the random seed or the port it prints.
	if err != nil || !strings.Contains(out, " 0 FAIL, ") || strings.Contains(out, "×429") {
		t.Fatalf("check with the presenter token: %v\n%s", err, out)
	}
}

// "paytwice bench -presenter-token" against a class server is admitted
// as the presenter too: every payment of its load is answered 201.
func TestBenchWithThePresenterTokenIsNotHeldToAStudentsShare(t *testing.T) {
	url := classServer(t, 2*time.Minute)
	if out, _, err := runCmd(t, "bench", "-url", url, "-presenter-token", classToken, "-c", "8", "-n", "200"); err != nil || strings.Contains(out, "429 ×") || !strings.Contains(out, "statuses    201 ×200\n") {
		t.Fatalf("bench with the presenter token: %v\n%s", err, out)
	}
}

package web

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

// classPay is one student's payment from client, sent from a goroutine:
// a failure to connect is status -1, not a fatal error.
func classPay(client *http.Client, base, key, order, auth string) response {
	req, err := http.NewRequest(http.MethodPost, base+paymentsPath, strings.NewReader(fmt.Sprintf(`{"order_id":%q,"amount_satang":129900}`, order)))
	if err != nil {
		return response{Status: -1, Body: []byte(err.Error())}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Authorization", auth)
	res, err := client.Do(req)
	if err != nil {
		return response{Status: -1, Body: []byte(err.Error())}
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return response{Status: res.StatusCode, Header: res.Header, Body: body}
}

// holdEveryGap makes the lab's pause between the check and the insert
// wait until release is closed, and reports each request reaching it.
func holdEveryGap(s *Server, n int) (reached chan struct{}, release chan struct{}) {
	reached, release = make(chan struct{}, n), make(chan struct{})
	s.payments.sleep = func(ctx context.Context, d time.Duration) error {
		reached <- struct{}{}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return reached, release
}

// A class of 60 behind one NAT address, with the presenter's token set
// and the default limits, double-clicks Pay in the chapters whose
// mistake is a pause between the check and the insert (7) and a lock in
// memory (8). The pause and the wait for the lock are the lab's, not
// work: every request must get past its turn and reach them at once
// (none may wait for a turn behind them), and every one is answered
// without a 429.
func TestClassBehindOneAddressDoubleClicksThroughTheLabsPauses(t *testing.T) {
	const students = 60
	for _, tc := range []struct {
		slug string
		// inGap is how many of a double-click's two requests reach the
		// pause: both in check-then-insert; one in the lock in memory,
		// while the other waits for the lock.
		inGap, waiting int
	}{
		{"check-then-insert", 2, 0},
		{"lock-in-memory", 1, 1},
	} {
		t.Run(tc.slug, func(t *testing.T) {
			env := newTestEnv(t, Config{PresenterToken: "front-of-the-room"})
			if err := env.Server.guidedLessons().start(t.Context(), tc.slug, "test"); err != nil {
				t.Fatal(err)
			}
			sub := env.Server.hub.Subscribe(env.Server.hub.LastSeq())
			reached, release := holdEveryGap(env.Server, 2*students)
			nat := fromAddress("127.0.0.2")
			answers := make(chan response, 2*students)
			for i := range students {
				key, order, auth := uuid.NewString(), fmt.Sprint("A-", 8000+i), fmt.Sprint("Bearer student-", i)
				for range 2 {
					go func() { answers <- classPay(nat, env.URL, key, order, auth) }()
				}
			}
			// Every request gets to the pause or to the lock's queue before
			// any is answered: an answer now is one refused for its turn.
			for n := 0; n < students*tc.inGap; n++ {
				select {
				case <-reached:
				case r := <-answers:
					t.Fatalf("after %d of %d requests reached the pause, one was answered %d: %s", n, students*tc.inGap, r.Status, r.Body)
				}
			}
			if tc.waiting > 0 {
				waitEvents(t, sub, students*tc.waiting, "the second clicks waiting for the lock", noteIs(memoryLockWaiting))
			}
			close(release)
			var got []response
			for range 2 * students {
				got = append(got, <-answers)
			}
			for _, r := range got {
				if r.Status <= 0 || r.Status == http.StatusTooManyRequests {
					t.Fatalf("answers %s; one was %d: %s", statusList(got), r.Status, r.Body)
				}
			}
		})
	}
}

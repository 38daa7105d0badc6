package web

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"paytwice/sim"
)

// An attack from many addresses, under many tokens, opening live views
// and abandoning them, looping on what is not a payment and paying, leaves
// the server's goroutines and its per-address and per-caller tables within
// their bounds while it lasts, and back near where they were once it is
// over and the idle entries have expired (on the fair shares' own clock,
// moved by hand).
func TestAnAttackLeavesGoroutinesAndTablesBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("an attack's worth of requests")
	}
	const token = "front-of-the-room"
	// Smaller tables than the defaults, so that the attack overfills them.
	const addresses, callers, attackers = 32, 128, 48
	clock := sim.NewManualClock(time.Date(2026, 12, 4, 9, 0, 0, 0, time.UTC))
	env := newTestEnv(t, Config{PresenterToken: token, LimitsClock: clock.Now,
		Limits: Limits{Addresses: addresses, Callers: callers, IdleAfter: 10 * time.Minute}})
	s := env.Server
	presenter := fromAddress("127.0.0.1")
	if r := payFrom(t, presenter, env.URL, "warm-up", "W-1", "Bearer presenter", PresenterHeader, token); r.Status != http.StatusCreated {
		t.Fatalf("the presenter's payment: %d %s", r.Status, r.Body)
	}
	presenter.CloseIdleConnections()
	settle := func(what string, cond func() bool) {
		t.Helper()
		// A guard against a leak that never ends, not a measure of speed.
		for i := 0; !cond(); i++ {
			if i == 3000 {
				t.Fatalf("still waiting after 30 s for %s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	baseline := runtime.NumGoroutine()

	// The attack: each address opens live views and drops them, sends
	// requests each under a new token and pays under new tokens; eight
	// addresses at a time.
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	var peak int
	var peakMu sync.Mutex
	for a := range attackers {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			client := fromAddress(fmt.Sprintf("127.0.4.%d", a+1))
			defer client.CloseIdleConnections()
			ctx, cancel := context.WithCancel(context.Background())
			for range 4 {
				openHeld(ctx, client, env.URL)
			}
			for i := range 12 {
				auth := "Bearer " + uuid.NewString()
				switch i % 4 {
				case 0:
					sendFrom(t, client, http.MethodPost, env.URL+"/api/delivery", fmt.Sprintf(`{"attempt":%q,"received":false,"why":"gone"}`, uuid.NewString()), "Authorization", auth)
				case 1:
					sendFrom(t, client, http.MethodGet, env.URL+"/api/backoff?base=500ms&cap=8s&retries=5", "", "Authorization", auth)
				case 2:
					sendFrom(t, client, http.MethodGet, env.URL+"/api/lessons", "", "Authorization", auth)
				default:
					payFrom(t, client, env.URL, uuid.NewString(), fmt.Sprintf("X%d-%d", a, i), auth)
				}
			}
			peakMu.Lock()
			peak = max(peak, runtime.NumGoroutine())
			peakMu.Unlock()
			cancel() // every live view dropped at once, unread
		})
	}
	wg.Wait()

	t.Run("while it lasts, every table stays within its bound", func(t *testing.T) {
		for name, tab := range s.clientTables() {
			bound := addresses
			if name == "callers" {
				bound = callers
			}
			if n := tab.size(); n > bound {
				t.Errorf("%s holds %d entries, more than its bound of %d", name, n, bound)
			}
		}
		// The attack did overfill them: they are full, the oldest making
		// room for the newest.
		tabs := s.clientTables()
		if n := tabs["deliveries per address"].size(); n != addresses {
			t.Errorf("the delivery reports' table holds %d addresses after %d sent some, want it full at %d", n, attackers, addresses)
		}
		if n := tabs["callers"].size(); n != callers {
			t.Errorf("the book of callers holds %d after %d tokens were let in, want it full at %d", n, attackers*12, callers)
		}
		t.Logf("peak goroutines %d (baseline %d)", peak, baseline)
	})
	t.Run("the dropped live views and finished payments leave nothing behind", func(t *testing.T) {
		settle("the dropped streams to be uncounted", func() bool {
			s.streams.mu.Lock()
			defer s.streams.mu.Unlock()
			return s.streams.held == 0 && len(s.streams.byAddress) == 0 && len(s.streams.bySession) == 0
		})
		settle("the payments' table to empty", func() bool {
			w, q, n := s.payments.counts()
			return w == 0 && q == 0 && n == 0
		})
	})
	t.Run("the goroutines come back near where they were", func(t *testing.T) {
		// The board's heartbeat and a few of the server's own may have
		// started meanwhile; a goroutine per attacker, stream or
		// connection would be hundreds.
		const slack = 16
		settle(fmt.Sprintf("goroutines to come back within %d of %d", slack, baseline), func() bool {
			return runtime.NumGoroutine() <= baseline+slack
		})
	})
	t.Run("once the attackers are idle long enough, the tables are empty again", func(t *testing.T) {
		clock.Advance(10*time.Minute + time.Second)
		s.forgetIdleClients()
		for name, tab := range s.clientTables() {
			if n := tab.size(); n != 0 {
				t.Errorf("%s still holds %d entries", name, n)
			}
		}
	})
}

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
		for name, tab := range s.admission.clientTables() {
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
		tabs := s.admission.clientTables()
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
			s.admission.streams.mu.Lock()
			defer s.admission.streams.mu.Unlock()
			return s.admission.streams.held == 0 && len(s.admission.streams.byAddress) == 0 && len(s.admission.streams.bySession) == 0
		})
		settle("the payments' table to empty", func() bool {
			w, q, n := s.admission.payments.counts()
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
		s.admission.forgetIdleClients()
		for name, tab := range s.admission.clientTables() {
			if n := tab.size(); n != 0 {
				t.Errorf("%s still holds %d entries", name, n)
			}
		}
	})
}

// An attack from two thousand addresses, each under new tokens, fills the
// per-address and per-caller tables with thousands of entries; once they
// have been idle long enough (on the fair shares' own clock, moved by
// hand) the heap is back within heapSlack of what it was before the
// attack. The requests are ones that leave nothing in the timeline (the
// lessons, the backoff schedule, a live view dropped at once): what the
// room keeps on purpose, the timeline, is bounded by its own shares and
// tested apart. A table whose idle entries never went would hold the
// attack's thousands of entries and fail this.
func TestAnAttackFromManyAddressesLeavesTheHeapWhereItWas(t *testing.T) {
	if testing.Short() {
		t.Skip("an attack's worth of requests")
	}
	const token = "front-of-the-room"
	const attackers = 2000
	// heapSlack is what may stay on the heap after the attack, for the
	// HTTP server's pools and the runtime's own: two thousand addresses'
	// entries in the tables take about 2.4 MiB, and the room their maps
	// grew to, kept if they were not made anew, over 1 MiB.
	const heapSlack = 512 << 10
	clock := sim.NewManualClock(time.Date(2026, 12, 4, 9, 0, 0, 0, time.UTC))
	env := newTestEnv(t, Config{PresenterToken: token, LimitsClock: clock.Now,
		Limits: Limits{IdleAfter: 10 * time.Minute}})
	s := env.Server
	attack := func(first, n int) {
		var wg sync.WaitGroup
		sem := make(chan struct{}, 8)
		for a := first; a < first+n; a++ {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				client := fromAddress(fmt.Sprintf("127.0.%d.%d", 20+a/250, 1+a%250))
				defer client.CloseIdleConnections()
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				openHeld(ctx, client, env.URL)
				sendFrom(t, client, http.MethodGet, env.URL+"/api/lessons", "", "Authorization", "Bearer "+uuid.NewString())
				sendFrom(t, client, http.MethodGet, env.URL+"/api/backoff?base=500ms&cap=8s&retries=5", "", "Authorization", "Bearer "+uuid.NewString())
			})
		}
		wg.Wait()
	}
	heap := func() uint64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	entries := func() int {
		n := 0
		for _, tab := range s.admission.clientTables() {
			n += tab.size()
		}
		return n
	}
	waitStreamsClosed := func() {
		for i := 0; ; i++ {
			s.admission.streams.mu.Lock()
			done := s.admission.streams.held == 0 && len(s.admission.streams.byAddress) == 0
			s.admission.streams.mu.Unlock()
			if done {
				return
			}
			if i == 3000 { // a guard against a leak, not a measure of speed
				t.Fatal("the dropped live views were still counted after 30 s")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	expire := func() {
		clock.Advance(10*time.Minute + time.Second)
		s.admission.forgetIdleClients()
	}
	// A first, small attack warms up what the server makes once (its
	// pools, its templates, the runtime's caches); then the baseline.
	attack(0, 50)
	waitStreamsClosed()
	expire()
	before := heap()

	attack(50, attackers)
	held := entries()
	during := heap()
	waitStreamsClosed()
	expire()
	if n := entries(); n != 0 {
		t.Errorf("the tables still hold %d entries once every attacker has been idle past Limits.IdleAfter", n)
	}
	after := heap()
	t.Logf("heap: %d KiB before the attack, %d KiB with the tables holding %d entries, %d KiB once they expired",
		before>>10, during>>10, held, after>>10)
	if held < attackers {
		t.Errorf("the attack from %d addresses left only %d entries in the tables: it did not fill them", attackers, held)
	}
	if after > before+heapSlack {
		t.Errorf("the heap is %d KiB once the attackers' entries expired, %d KiB more than before the attack (at most %d KiB)",
			after>>10, (after-before)>>10, heapSlack>>10)
	}
}

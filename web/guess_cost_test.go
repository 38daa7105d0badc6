package web

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"paytwice/sim"
	"paytwice/web/room"
)

// guessCounter is shared peers that count the transactions on the count
// of wrong tokens: how many, and how many at once at most, in all and for
// one address.
type guessCounter struct {
	room.Peers
	calls atomic.Int64

	mu                 sync.Mutex
	now, most          int
	byAddress          map[string]int
	mostForOneAddress  int
	addressesAtTheMost string
	errs               []error
}

func countGuesses(p room.Peers) *guessCounter {
	return &guessCounter{Peers: p, byAddress: map[string]int{}}
}

func (g *guessCounter) UpdateGuesses(ctx context.Context, client string, forgetBefore time.Time, change func(room.Guesses, bool) room.Guesses) error {
	g.calls.Add(1)
	g.mu.Lock()
	g.now++
	g.most = max(g.most, g.now)
	g.byAddress[client]++
	if g.byAddress[client] > g.mostForOneAddress {
		g.mostForOneAddress, g.addressesAtTheMost = g.byAddress[client], client
	}
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.now--
		g.byAddress[client]--
		g.mu.Unlock()
	}()
	err := g.Peers.UpdateGuesses(ctx, client, forgetBefore, change)
	if err != nil {
		g.mu.Lock()
		g.errs = append(g.errs, err)
		g.mu.Unlock()
	}
	return err
}

func (g *guessCounter) atMost() (all, oneAddress int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.most, g.mostForOneAddress
}

// Once an address has sent the limit of wrong presenter tokens, the
// server knows from the shared count's last answer that it is out of
// tries until a given time (the other servers only ever spend tries): its
// next wrong tokens, however many at once, are refused 429 from memory,
// without a transaction on the shared count. On PostgreSQL with
// PAYTWICE_TEST_POSTGRES, else on room.SharedMemory().
func TestWrongTokensPastTheLimitCostNoTransaction(t *testing.T) {
	waitsOnRealClocks(t)
	const token, mark, guesser = "s3cret-lecture", "the-door's-mark", "192.0.2.9"
	c := newClass(t)
	var counter *guessCounter
	env := c.server(Config{PresenterToken: token, BehindFrontDoor: true, FrontDoorMark: mark},
		func(p room.Peers) room.Peers { counter = countGuesses(p); return counter })
	clock := sim.NewManualClock(time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)) // no try comes back meanwhile
	env.Server.admission.presenter.tries.now = clock.Now
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: time.Minute}
	defer client.CloseIdleConnections()
	guess := func(tok string) response {
		return sendFrom(t, client, http.MethodPatch, env.URL+"/api/faults", `{"server":{"delay_ms":1}}`,
			PresenterHeader, tok, "X-Forwarded-For", guesser, FrontDoorHeader, mark)
	}
	for i := range guessBurst {
		if r := guess("guess-" + strconv.Itoa(i)); r.Status != http.StatusForbidden {
			t.Fatalf("wrong token %d within the limit: %d %s", i, r.Status, r.Body)
		}
	}
	if n := counter.calls.Load(); n != guessBurst {
		t.Fatalf("%d transactions for the %d wrong tokens within the limit, want one each", n, guessBurst)
	}
	const more = 200
	statuses := make([]int, more)
	var wg sync.WaitGroup
	for i := range more {
		wg.Go(func() { statuses[i] = guess("more-" + strconv.Itoa(i)).Status })
	}
	wg.Wait()
	count := map[int]int{}
	for _, s := range statuses {
		count[s]++
	}
	if count[http.StatusTooManyRequests] != more {
		t.Errorf("%d wrong tokens past the limit: %v, want every one 429", more, count)
	}
	if n := counter.calls.Load() - guessBurst; n != 0 {
		t.Errorf("%d wrong tokens past the limit cost %d transactions on the shared count, want none", more, n)
	}
	// The right token from that address is not looked at either until a
	// try comes back, and costs nothing meanwhile.
	if r := guess(token); r.Status != http.StatusTooManyRequests {
		t.Errorf("the right token from the address out of tries: %d %s, want 429", r.Status, r.Body)
	}
	if n := counter.calls.Load() - guessBurst; n != 0 {
		t.Errorf("the right token from the address out of tries cost %d transactions, want none", n)
	}
}

// Many addresses guessing at once hold few of the database's connections:
// one guess per address at a time goes to the shared count, guessDBSlots
// in all, while the others wait in memory or are refused. Another
// address's payments meanwhile all go through (each server of a class has
// a pool of 4 connections here, more than guessDBSlots). Counted, not
// timed.
func TestGuessesHoldFewConnections(t *testing.T) {
	waitsOnRealClocks(t)
	const token, mark = "s3cret-lecture", "the-door's-mark"
	const addresses, loops, each, payments = 16, 64, 4, 12
	c := newClass(t)
	var counter *guessCounter
	env := c.server(Config{PresenterToken: token, BehindFrontDoor: true, FrontDoorMark: mark},
		func(p room.Peers) room.Peers { counter = countGuesses(p); return counter })
	clock := sim.NewManualClock(time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)) // no try comes back meanwhile
	env.Server.admission.presenter.tries.now = clock.Now
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: loops + payments}, Timeout: time.Minute}
	defer client.CloseIdleConnections()
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range loops {
		wg.Go(func() {
			<-start
			from := "192.0.2." + strconv.Itoa(10+i%addresses)
			for j := range each {
				sendFrom(t, client, http.MethodPatch, env.URL+"/api/faults", `{"server":{"delay_ms":1}}`,
					PresenterHeader, "guess-"+strconv.Itoa(i)+"-"+strconv.Itoa(j), "X-Forwarded-For", from, FrontDoorHeader, mark)
			}
		})
	}
	paid := make([]int, payments)
	for i := range payments {
		wg.Go(func() {
			<-start
			paid[i] = payFrom(t, client, env.URL, "pay-"+strconv.Itoa(i), "O-"+strconv.Itoa(i), "Bearer student-"+strconv.Itoa(i)).Status
		})
	}
	close(start)
	wg.Wait()
	all, one := counter.atMost()
	t.Logf("%d transactions on the shared count, at most %d at once, at most %d for one address; %d failed: %v", counter.calls.Load(), all, one, len(counter.errs), counter.errs)
	if all > guessDBSlots {
		t.Errorf("%d transactions on the shared count at once, want at most %d", all, guessDBSlots)
	}
	if one > 1 {
		t.Errorf("%d transactions at once for address %s, want one at a time", one, counter.addressesAtTheMost)
	}
	// A transaction that failed (a look past its bound on a loaded
	// machine) taught nothing: the address's next guess asks again.
	if n := counter.calls.Load() - int64(len(counter.errs)); n == 0 || n > addresses*guessBurst {
		t.Errorf("%d transactions that answered for %d addresses guessing, want between 1 and %d (the limit each)", n, addresses, addresses*guessBurst)
	}
	for i, s := range paid {
		if s != http.StatusCreated {
			t.Errorf("payment %d while the guesses ran: %d, want 201", i, s)
		}
	}
}

// The presenter sending the token in the header pays one transaction on
// the shared count, then none while the same token comes from the same
// address; a wrong token from that address is still counted and refused
// as before (and ends what was kept, so the right one pays again), an
// address out of tries is refused the right token as before, another
// address pays its own, and the room's reset forgets what was kept.
func TestThePresentersHeaderTokenIsLookedAtOnceNotEveryRequest(t *testing.T) {
	waitsOnRealClocks(t)
	const token, mark, front, back = "s3cret-lecture", "the-door's-mark", "192.0.2.10", "192.0.2.11"
	c := newClass(t)
	var counter *guessCounter
	env := c.server(Config{PresenterToken: token, BehindFrontDoor: true, FrontDoorMark: mark},
		func(p room.Peers) room.Peers { counter = countGuesses(p); return counter })
	gate := env.Server.admission.presenter
	if !gate.guesses.Shared() {
		t.Fatal("the count of wrong tokens is not shared here: this test is about the shared one")
	}
	clock := sim.NewManualClock(time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)) // no try comes back unless moved
	gate.tries.now, gate.known.now = clock.Now, clock.Now
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}, Timeout: time.Minute}
	defer client.CloseIdleConnections()
	send := func(from, tok string) response {
		return sendFrom(t, client, http.MethodPatch, env.URL+"/api/faults", `{"server":{"delay_ms":1}}`,
			PresenterHeader, tok, "X-Forwarded-For", from, FrontDoorHeader, mark)
	}
	expect := func(what string, r response, status int, calls int64) {
		t.Helper()
		if r.Status != status {
			t.Fatalf("%s: %d %s, want %d", what, r.Status, r.Body, status)
		}
		if n := counter.calls.Load(); n != calls {
			t.Fatalf("%s: %d transactions on the shared count so far, want %d", what, n, calls)
		}
	}
	for i := range 20 {
		expect(fmt.Sprintf("the presenter's request %d", i+1), send(front, token), http.StatusOK, 1)
	}
	expect("the token from another address", send(back, token), http.StatusOK, 2)
	expect("the token again from there", send(back, token), http.StatusOK, 2)
	// A wrong token from the presenter's own address: counted, 403.
	expect("a wrong token from the presenter's address", send(front, "guess-0"), http.StatusForbidden, 3)
	expect("the right token after it", send(front, token), http.StatusOK, 4)
	expect("and again", send(front, token), http.StatusOK, 4)
	// A minute after the count last took it, it is looked at again.
	clock.Advance(knownTokenFor + time.Second)
	expect("a minute later", send(front, token), http.StatusOK, 5)
	// Its tries are all back by now: five wrong ones use them up, each
	// counted.
	for i := 1; i <= guessBurst; i++ {
		expect(fmt.Sprintf("wrong token %d", i), send(front, "guess-"+strconv.Itoa(i)), http.StatusForbidden, int64(5+i))
	}
	calls := counter.calls.Load()
	expect("a wrong token past the limit", send(front, "guess-more"), http.StatusTooManyRequests, calls)
	expect("the right token from the address out of tries", send(front, token), http.StatusTooManyRequests, calls)
	// The other address is not slowed down; its entry lapsed with the
	// minute, so the count takes its token once more, then it is kept
	// until the room's reset forgets it.
	expect("the other address's token", send(back, token), http.StatusOK, calls+1)
	expect("and again", send(back, token), http.StatusOK, calls+1)
	r := sendFrom(t, client, http.MethodPost, env.URL+"/api/reset", ``, PresenterHeader, token, "X-Forwarded-For", back, FrontDoorHeader, mark)
	if r.Status/100 != 2 {
		t.Fatalf("reset: %d %s", r.Status, r.Body)
	}
	if n := gate.known.size(); n != 0 {
		t.Fatalf("after the room's reset the token is known on %d addresses", n)
	}
	calls = counter.calls.Load()
	expect("the other address's token after the reset", send(back, token), http.StatusOK, calls+1)
	if gate.known.size() != 1 {
		t.Fatal("the token taken after the reset is not kept")
	}
}

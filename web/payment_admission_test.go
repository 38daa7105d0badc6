package web

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"paytwice/sim"
)

// A student past their share of payments is answered 429 with
// Retry-After and a sentence, before anything is claimed: nothing is
// charged, and the same key works once the share has come back. Another
// student behind the same address, and the presenter, pay as usual.
func TestPaymentsBeyondTheirShareGet429AndLeaveTheKeyUnused(t *testing.T) {
	t.Parallel()
	const token = "front-of-the-room"
	env := newTestEnv(t, Config{PresenterToken: token, Limits: Limits{
		CallerPayments: Rate{Burst: 2, Every: time.Minute},
		Payments:       Rate{Burst: 4, Every: time.Minute},
		PaymentWait:    time.Millisecond,
	}})
	clock := sim.NewManualClock(time.Date(2026, 12, 4, 9, 0, 0, 0, time.UTC))
	env.Server.admission.payments.byCaller.now, env.Server.admission.payments.byAddress.now = clock.Now, clock.Now
	student, presenter := fromAddress("127.0.0.2"), fromAddress("127.0.0.1")

	for i := range 2 {
		if r := payFrom(t, student, env.URL, fmt.Sprint("k", i), fmt.Sprint("A-", i), "Bearer alice"); r.Status != http.StatusCreated {
			t.Fatalf("payment %d within the share: %d %s", i, r.Status, r.Body)
		}
	}
	over := payFrom(t, student, env.URL, "k2", "A-2", "Bearer alice")
	t.Run("the third is refused with 429, Retry-After and a sentence", func(t *testing.T) {
		if over.Status != http.StatusTooManyRequests {
			t.Fatalf("got %d %s", over.Status, over.Body)
		}
		if ra := over.Header.Get("Retry-After"); ra != "60" {
			t.Errorf("Retry-After %q, want 60 (the next token)", ra)
		}
		if ct := over.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
			t.Errorf("Content-Type %q", ct)
		}
		var p struct{ Detail string }
		_ = json.Unmarshal(over.Body, &p)
		for _, want := range []string{"Nothing was charged", "same key", "caller-payments"} {
			if !strings.Contains(p.Detail, want) {
				t.Errorf("the sentence %q does not say %q", p.Detail, want)
			}
		}
	})
	t.Run("nothing was charged and the key was not claimed", func(t *testing.T) {
		if n := env.charges(); n != 2 {
			t.Errorf("%d charges, want the 2 within the share", n)
		}
		if _, err := env.Server.db.GetKey(t.Context(), "token:"+scopeID("alice"), "k2"); err == nil {
			t.Errorf("the refused key was saved")
		}
		r := getFrom(t, student, env.URL+paymentsPath+"?order_id=A-2", "Authorization", "Bearer alice")
		if strings.Contains(string(r.Body), `"charge_id"`) {
			t.Errorf("the refused order has a charge: %s", r.Body)
		}
	})
	t.Run("another caller behind the address and the presenter are not held back", func(t *testing.T) {
		if r := payFrom(t, student, env.URL, "b0", "B-0", "Bearer bob"); r.Status != http.StatusCreated {
			t.Errorf("bob: %d %s", r.Status, r.Body)
		}
		for i := range 5 {
			if r := payFrom(t, presenter, env.URL, fmt.Sprint("p", i), fmt.Sprint("P-", i), "Bearer presenter", PresenterHeader, token); r.Status != http.StatusCreated {
				t.Errorf("the presenter's payment %d: %d %s", i, r.Status, r.Body)
			}
		}
	})
	t.Run("the same key works once the share has come back, and charges once", func(t *testing.T) {
		clock.Advance(time.Minute)
		r := payFrom(t, student, env.URL, "k2", "A-2", "Bearer alice")
		if r.Status != http.StatusCreated {
			t.Fatalf("the retry: %d %s", r.Status, r.Body)
		}
		if n := env.charges(); n != 2+1+5+1 {
			t.Errorf("%d charges, want 9", n)
		}
	})
	t.Run("one caller behind the address cannot take the address's whole share", func(t *testing.T) {
		clock.Advance(time.Hour)
		// Carol spends her share; the address keeps the rest for others.
		for i := range 3 {
			payFrom(t, student, env.URL, fmt.Sprint("c", i), fmt.Sprint("C-", i), "Bearer carol")
		}
		if r := payFrom(t, student, env.URL, "d0", "D-0", "Bearer dave"); r.Status != http.StatusCreated {
			t.Errorf("dave after carol's flood: %d %s", r.Status, r.Body)
		}
	})
}

// Payments take turns: one address has at most its share at work at
// once, the rest wait and are then served, and waiting payments of
// several callers are let in in turn, whoever sent more.
func TestPaymentTurnsAreSharedAmongAddressesAndCallers(t *testing.T) {
	t.Parallel()
	a := newPaymentAdmission(Limits{PaymentsPerAddress: 2, PaymentsAtWork: 3}.withDefaults(), time.Now, true)
	ctx := t.Context()
	hold := func(ip, caller string) *paySlot {
		s, no := a.admit(ctx, ip, caller, false)
		if no != nil {
			t.Fatalf("%s %s refused: %v", ip, caller, no.err)
		}
		return s
	}
	s1, s2 := hold("10.0.0.1", "flood"), hold("10.0.0.1", "flood")
	s3 := hold("10.0.0.2", "x")
	if w, q, _ := a.counts(); w != 3 || q != 0 {
		t.Fatalf("at work %d, waiting %d; want 3 and 0", w, q)
	}
	// Ten more of the flood's wait, then one of a classmate's, then one of
	// another address's.
	type admitted struct {
		caller string
		slot   *paySlot
	}
	in := make(chan admitted, 16)
	var wg sync.WaitGroup
	enqueue := func(ip, caller string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, no := a.admit(ctx, ip, caller, false)
			if no != nil {
				t.Errorf("%s refused: %v", caller, no.err)
				return
			}
			in <- admitted{caller, s}
		}()
	}
	waiting := func() int { _, q, _ := a.counts(); return q }
	for i := range 10 {
		enqueue("10.0.0.1", "flood")
		waitUntil(t, fmt.Sprintf("the flood's payment %d to wait", i), func() bool { return waiting() == i+1 })
	}
	enqueue("10.0.0.1", "classmate")
	waitUntil(t, "the classmate's payment to wait", func() bool { return waiting() == 11 })
	enqueue("10.0.0.3", "other address")
	waitUntil(t, "the other address's payment to wait", func() bool { return waiting() == 12 })
	next := func() admitted {
		select {
		case got := <-in:
			return got
		case <-time.After(waitUntilBound):
			t.Fatal("nobody was let in")
		}
		return admitted{}
	}
	// Two turns end, one of each address: the first address's next turn
	// and the freed work go to the flood's first and to the other
	// address, which does not wait behind the flood's ten.
	s1.done()
	s3.done()
	got := map[string]int{}
	first, second := next(), next()
	got[first.caller]++
	got[second.caller]++
	if got["flood"] != 1 || got["other address"] != 1 {
		t.Errorf("let in %s and %s; want one of the flood's and the other address's", first.caller, second.caller)
	}
	// The flood's next turn goes to the classmate, not its second.
	var flood *paySlot
	for _, g := range []admitted{first, second} {
		if g.caller == "flood" {
			flood = g.slot
		} else {
			g.slot.done()
		}
	}
	flood.done()
	if g := next(); g.caller != "classmate" {
		t.Errorf("after the flood's turn, %s was let in; want the classmate", g.caller)
	} else {
		g.slot.done()
	}
	s2.done()
	for range 9 {
		next().slot.done()
	}
	wg.Wait()
	if w, q, n := a.counts(); w != 0 || q != 0 || n != 0 {
		t.Errorf("afterwards %d at work, %d waiting, %d addresses held; want none", w, q, n)
	}
}

// A payment that waits on something costing nothing gives its turn back:
// another payment of its address runs meanwhile; taking it back never
// waits.
func TestPausedPaymentGivesItsTurnBack(t *testing.T) {
	t.Parallel()
	a := newPaymentAdmission(Limits{PaymentsPerAddress: 1, PaymentsAtWork: 1}.withDefaults(), time.Now, true)
	s1, _ := a.admit(t.Context(), "10.0.0.1", "a", false)
	s1.pause()
	s2, no := a.admit(t.Context(), "10.0.0.1", "b", false)
	if no != nil {
		t.Fatalf("refused while the first was paused: %v", no.err)
	}
	s1.resume() // at once, beyond the share for a moment
	if w, _, _ := a.counts(); w != 2 {
		t.Errorf("%d at work, want 2", w)
	}
	s1.done()
	s2.done()
	s2.done()
	if w, q, n := a.counts(); w != 0 || q != 0 || n != 0 {
		t.Errorf("afterwards %d at work, %d waiting, %d addresses; want none", w, q, n)
	}
}

// A payment refused for its address's full queue, or after waiting too
// long for its turn, started nothing: the rate's tokens it took go back,
// so its retries do not use up its caller's share.
func TestPaymentsRefusedForTheirTurnGiveTheirRateBack(t *testing.T) {
	t.Parallel()
	clock := sim.NewManualClock(time.Date(2026, 12, 4, 9, 0, 0, 0, time.UTC))
	a := newPaymentAdmission(Limits{PaymentsPerAddress: 1, PaymentsAtWork: 1, PaymentsQueued: 1, PaymentWait: 300 * time.Millisecond,
		CallerPayments: Rate{Burst: 3, Every: time.Hour}}.withDefaults(), clock.Now, true)
	const ip, caller = "10.0.0.1", "alice"
	first, no := a.admit(t.Context(), ip, caller, false)
	if no != nil {
		t.Fatalf("the first: %v", no.err)
	}
	waited := make(chan *payRefusal, 1)
	go func() {
		s, no := a.admit(t.Context(), ip, caller, false)
		s.done()
		waited <- no
	}()
	waitUntil(t, "the second to wait", func() bool { _, q, _ := a.counts(); return q == 1 })
	if _, no := a.admit(t.Context(), ip, caller, false); no == nil {
		t.Fatal("the third was taken in past a full queue")
	}
	if no := <-waited; no == nil {
		t.Fatal("the second was taken in while the first was at work")
	}
	first.done()
	// Of the three tokens only the first's is spent: two payments more
	// are taken in within the hour.
	for i := range 2 {
		s, no := a.admit(t.Context(), ip, caller, false)
		if no != nil {
			t.Fatalf("payment %d after the refusals: %v", i, no.err)
		}
		s.done()
	}
}

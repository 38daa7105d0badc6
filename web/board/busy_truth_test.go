package board

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"paytwice/pay"
)

// heldWall is a wall clock that moves only when the test moves it: busy
// mode and the callers' shares read it, so a burst counts as one instant
// whatever the machine's load, and the silence after it is a step of the
// test, not a sleep. Its timers (After, the board's Config.After) fire
// when a step of the test moves it past their time.
type heldWall struct {
	ns     atomic.Int64
	mu     sync.Mutex
	timers []wallTimer
}

// wallTimer is f, due at the wall's time due (in nanoseconds).
type wallTimer struct {
	due int64
	f   func()
}

func newHeldWall() *heldWall {
	w := &heldWall{}
	w.ns.Store(time.Now().UnixNano())
	return w
}

func (w *heldWall) Now() time.Time { return time.Unix(0, w.ns.Load()) }

// After runs f in a goroutine of its own, as time.AfterFunc does, once
// the wall has moved d on.
func (w *heldWall) After(d time.Duration, f func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.timers = append(w.timers, wallTimer{due: w.ns.Load() + int64(d), f: f})
}

// flush fires every timer now, without moving the wall: what a board's
// real timers did while a test waited for a held frame with the wall
// standing still.
func (w *heldWall) flush() {
	w.mu.Lock()
	due := w.timers
	w.timers = nil
	w.mu.Unlock()
	for _, t := range due {
		go t.f()
	}
}

// advance moves the wall d on and fires the timers that are then due.
func (w *heldWall) advance(d time.Duration) {
	now := w.ns.Add(int64(d))
	w.mu.Lock()
	var due []func()
	kept := w.timers[:0]
	for _, t := range w.timers {
		if t.due <= now {
			due = append(due, t.f)
		} else {
			kept = append(kept, t)
		}
	}
	w.timers = kept
	w.mu.Unlock()
	for _, f := range due {
		go f()
	}
}

var (
	shownCount    = regexp.MustCompile(`<dd id="(n-requests|n-charges)"[^>]*>(\d+)</dd>`)
	shownKeysBody = regexp.MustCompile(`(?s)<tbody id="keys-body"[^>]*>.*?</tbody>`)
	shownKeyRow   = regexp.MustCompile(`<tr id="([^"]+)" class="key-(done|started)"`)
)

// pageState is what one open page shows, as its frames left it.
type pageState struct {
	mu       sync.Mutex
	counts   map[string]int // n-requests and n-charges, as last drawn
	keysBody string         // the keys table's body, as last drawn whole
}

func (s *pageState) read(data string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range shownCount.FindAllStringSubmatch(data, -1) {
		n, _ := strconv.Atoi(m[2])
		s.counts[m[1]] = n
	}
	if bodies := shownKeysBody.FindAllString(data, -1); len(bodies) > 0 {
		s.keysBody = bodies[len(bodies)-1]
	}
}

// TestABusyBurstEndsWithEveryPageShowingTheBooks: a burst of payments
// fast enough to put the board in busy mode, then silence. Every open page
// must end up showing what the books hold, not what the events counted:
// the books have one charge more than the events tell of (saved with no
// event, as one lost on its way to the board would be), and every page
// must show the books' number of charges, every request counted, and a
// keys table redrawn full (its capacity) with the books' newest keys, in
// the books' order, every one done. The payments are real rows in the
// board's SQLite file; their events come as the server publishes them,
// from a class of callers each within its share. Busy mode ends on the
// board's own ticker once the held wall clock is moved past the burst:
// nothing else is published to carry the last frame.
func TestABusyBurstEndsWithEveryPageShowingTheBooks(t *testing.T) {
	wall := newHeldWall()
	// The books' clock is the held wall too, so that which keys are the
	// newest is the test's to say: the last ones are saved one at a time,
	// a millisecond apart.
	books, b := newBooksBoard(t, wall)
	const pages, payments = 3, 300
	// The last payment is in the books only: it has no event.
	const unseen = payments

	states := make([]*pageState, pages)
	for i := range pages {
		st := &pageState{counts: map[string]int{}}
		states[i] = st
		s := b.open(t)
		go func() {
			for {
				_, data, _, err := s.next()
				if err != nil {
					return
				}
				st.read(data)
			}
		}()
	}
	waitUntil(t, "the pages to be open", func() bool { return b.Viewers() == pages })

	// The books first: each payment's key and charge saved as the payment
	// path saves them, eight at a time, then the newest ones (and the one
	// with no event) one at a time.
	scope := func(i int) string { return fmt.Sprintf("session:board-%d", i%64) }
	ctx := context.Background()
	save := func(i int) error {
		e := paymentEvents(i)[4]
		req := pay.ClaimRequest{Scope: scope(i), Key: e.Key, Method: "POST", Path: "/v1/payments", Fingerprint: "fp", OrderID: e.OrderID, AmountSatang: e.Amount}
		res, err := books.Claim(ctx, req)
		if err != nil || !res.Claimed {
			return fmt.Errorf("claim %d: %+v %v", i, res, err)
		}
		ch := &pay.Charge{ID: e.Charge, Scope: req.Scope, Key: req.Key, OrderID: req.OrderID, AmountSatang: req.AmountSatang, GatewayRef: "gw_" + strconv.Itoa(i), CreatedAt: wall.Now()}
		if _, err := books.Complete(ctx, pay.Completion{ClaimRequest: req, Claim: res.Claim, Status: 201, Body: ch.ResponseBody(), Charge: ch}); err != nil {
			return fmt.Errorf("complete %d: %v", i, err)
		}
		return nil
	}
	const oneByOne = payments - liveKeys + 1
	var wg sync.WaitGroup
	errs := make(chan error, payments)
	work := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if err := save(i); err != nil {
					errs <- err
				}
			}
		}()
	}
	for i := range oneByOne {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i := oneByOne; i <= unseen; i++ {
		wall.advance(time.Millisecond)
		if err := save(i); err != nil {
			t.Fatal(err)
		}
	}
	charges, err := books.CountCharges(ctx)
	if err != nil || charges != payments+1 {
		t.Fatalf("the books hold %d charges (%v), want %d", charges, err, payments+1)
	}
	// The keys table's rows as the books order them: the newest first.
	var newest []string
	for i := unseen; len(newest) < liveKeys; i-- {
		newest = append(newest, keyDOMID(scope(i), paymentEvents(i)[0].Key))
	}

	// The events of every payment but the last, all in one instant of the
	// held clock.
	for i := range payments {
		for _, e := range paymentEvents(i) {
			e.Scope = scope(i)
			b.hub.Publish(e)
		}
		if i%50 == 49 {
			b.caughtUp(t) // bursts the ring holds
		}
	}
	b.caughtUp(t)
	if !b.busyFlag.Load() {
		t.Fatalf("%d events in one instant did not put the board in busy mode", 6*payments)
	}
	last := b.hub.LastSeq()

	// Silence: the clock moves on past the burst, and nothing more is
	// published.
	wall.advance(2 * time.Second)
	shows := func(st *pageState) (bool, string) {
		st.mu.Lock()
		defer st.mu.Unlock()
		var ids []string
		done := 0
		for _, r := range shownKeyRow.FindAllStringSubmatch(st.keysBody, -1) {
			ids = append(ids, r[1])
			if r[2] == "done" {
				done++
			}
		}
		keysRight := strings.Join(ids, " ") == strings.Join(newest, " ")
		what := fmt.Sprintf("requests %d, charges %d, keys table %d rows (%d done, the books' newest in order: %v)", st.counts["n-requests"], st.counts["n-charges"], len(ids), done, keysRight)
		return st.counts["n-requests"] == payments && st.counts["n-charges"] == charges && keysRight && done == len(ids), what
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		all := !b.busyFlag.Load()
		for _, st := range states {
			if ok, _ := shows(st); !ok {
				all = false
			}
		}
		if all {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("30 s after the burst, busy mode on: %v", b.busyFlag.Load())
			for i, st := range states {
				_, what := shows(st)
				t.Errorf("page %d shows %s; the books: %d charges, the %d newest keys all done; the events: %d requests", i, what, charges, liveKeys, payments)
			}
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := b.hub.LastSeq(); got != last {
		t.Fatalf("events were published after the burst (%d, then %d): the test proves nothing", last, got)
	}
}

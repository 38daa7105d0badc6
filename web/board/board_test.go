package board

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/a-h/templ"

	"paytwice/store"
	"paytwice/views"
	"paytwice/web/live"
	"paytwice/web/room/step"
)

// testBoard is a board over a real SQLite file and a real hub, served on
// 127.0.0.1 as GET /events is.
type testBoard struct {
	*Board
	hub *live.Hub
	db  *store.DB
	url string
}

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

func newTestBoard(t testing.TB, tune func(*Config), maxStreams int) *testBoard {
	t.Helper()
	db, err := store.Open(filepath.Join(t.TempDir(), "board.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	hub := live.New(4096, time.Now)
	t.Cleanup(hub.Close)
	cfg := Config{Store: db, Hub: hub, Clock: wallClock{}, Ctx: ctx, Logf: t.Logf,
		Steps:    step.New(ctx, step.Config{Hub: hub, Now: time.Now}),
		Switches: func() views.FaultSwitches { return views.FaultSwitches{} }}
	if tune != nil {
		tune(&cfg)
	}
	b := &testBoard{Board: Start(cfg), hub: hub, db: db}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := b.Stream(w, r, maxStreams); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(srv.Close)
	b.url = srv.URL
	return b
}

// caughtUp waits until the board has applied every event published.
func (b *testBoard) caughtUp(t testing.TB) *testBoard {
	t.Helper()
	waitUntil(t, "the board to catch up", func() bool { return b.Caught(b.hub.LastSeq()) })
	return b
}

// waitUntil polls cond every few milliseconds, for up to two minutes: a
// bound only a broken test reaches (docs/testing.md).
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// stream is a viewer of the board.
type stream struct {
	res    *http.Response
	r      *bufio.Reader
	cancel context.CancelFunc
}

func (b *testBoard) open(t *testing.T, header ...string) *stream {
	t.Helper()
	// The stream lasts the test (closed at cleanup), within waitUntil's
	// bound: a fixed 20 s cut the page off mid-test on a loaded machine.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	s := &stream{res: res, r: bufio.NewReader(res.Body), cancel: cancel}
	t.Cleanup(s.close)
	return s
}

func (s *stream) close() { s.cancel(); s.res.Body.Close() }

// next reads one event: its id and data, or a comment.
func (s *stream) next() (id uint64, data, comment string, err error) {
	var lines []string
	for {
		l, err := s.r.ReadString('\n')
		if err != nil {
			return 0, "", "", err
		}
		l = strings.TrimRight(l, "\n")
		switch {
		case l == "":
			if len(lines) > 0 || comment != "" {
				return id, strings.Join(lines, "\n"), comment, nil
			}
		case strings.HasPrefix(l, ": "):
			comment = l[2:]
		case strings.HasPrefix(l, "id: "):
			_, id, _ = live.ParseEventID(l[4:])
		case strings.HasPrefix(l, "data: "):
			lines = append(lines, l[6:])
		}
	}
}

// paymentEvents are the events of one ordinary payment, in order.
func paymentEvents(i int) []live.Event {
	rq := fmt.Sprintf("rq_b%07d", i)
	base := live.Event{Request: rq, Scope: "session:board", Key: fmt.Sprintf("board-key-%d", i), OrderID: fmt.Sprintf("B-%d", i), Amount: 129900}
	steps := []struct {
		kind   live.Kind
		status int
		msg    string
		charge string
	}{
		{live.Received, 0, "POST /v1/payments", ""},
		{live.Claimed, 0, "key row inserted as started", ""},
		{live.GatewayCall, 0, "charging the gateway with the key", ""},
		{live.GatewayReply, 200, "charged gw_0123456789abcdef01234567", ""},
		{live.Charged, 0, "charge recorded", fmt.Sprintf("ch_%024x", i)},
		{live.Completed, 201, "response saved on the key", ""},
	}
	out := make([]live.Event, len(steps))
	for j, s := range steps {
		e := base
		e.Kind, e.Status, e.Message, e.Charge = s.kind, s.status, s.msg, s.charge
		out[j] = e
	}
	return out
}

func outcomes(rows []views.TimelineRow) []string {
	var out []string
	for _, r := range rows {
		out = append(out, fmt.Sprintf("%s=%s", r.Title, r.Outcome.Text))
	}
	return out
}

func TestBoardStreams(t *testing.T) {
	t.Run("a viewer from before a restart gets one frame that redraws every panel", func(t *testing.T) {
		b := newTestBoard(t, nil, 10)
		for _, e := range paymentEvents(1) {
			b.hub.Publish(e)
		}
		b.caughtUp(t)
		s := b.open(t, "Last-Event-ID", "999999")
		id, data, _, err := s.next()
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{`id="timeline"`, `id="keys-body"`, `id="charges-body"`, `id="counters"`, `id="fault-fields"`, "201 paid"} {
			if !strings.Contains(data, want) {
				t.Errorf("the redraw lacks %s", want)
			}
		}
		if id != b.Snapshot().Seq {
			t.Errorf("the redraw's id is %d, want the board's %d", id, b.Snapshot().Seq)
		}
	})

	t.Run("a viewer with a write gap gets every frame, in order, those of the gap together after it", func(t *testing.T) {
		const gap = 300 * time.Millisecond
		b := newTestBoard(t, func(c *Config) {
			c.WriteGap = func(r *http.Request) time.Duration {
				if r.Header.Get("X-Student") != "" {
					return gap
				}
				return 0
			}
		}, 10)
		student, presenter := b.open(t, "X-Student", "1"), b.open(t)
		waitUntil(t, "the viewers to be connected", func() bool { return b.Viewers() == 2 })
		for _, s := range []*stream{student, presenter} {
			if _, _, _, err := s.next(); err != nil { // the redraw
				t.Fatal(err)
			}
		}
		const frames = 8
		publish := func(i uint64) {
			b.mu.Lock()
			b.addFrameLocked(1000+i, false, []templ.Component{templ.Raw(fmt.Sprintf("<p>frame %d</p>", i))})
			b.mu.Unlock()
			waitUntil(t, "a wake", func() bool { b.mu.Lock(); defer b.mu.Unlock(); return b.pulsed.Load() == b.frames })
		}
		// next reads s up to frame want (skipping heartbeats) and says
		// when it came.
		next := func(name string, s *stream, want uint64) time.Time {
			for {
				id, data, _, err := s.next()
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if data == "" {
					continue // a heartbeat
				}
				if id != want || !strings.Contains(data, fmt.Sprintf("frame %d", want-1000)) {
					t.Fatalf("%s got frame %d (%q), want %d", name, id, data, want)
				}
				return time.Now()
			}
		}
		// The first frame goes to the student at once and alone: the rest
		// are published only once it has arrived, so they cannot share
		// its write and must wait for the gap after it. The gap runs from
		// that write, which came after the first frame was published;
		// only the reader's own lateness can stretch what is measured
		// here, never shrink it, so the bound holds on a loaded machine.
		published := time.Now()
		publish(0)
		next("the student", student, 1000)
		for i := uint64(1); i < frames; i++ {
			publish(i)
		}
		var last time.Time
		for want := uint64(1001); want < 1000+frames; want++ {
			last = next("the student", student, want)
		}
		if waited := last.Sub(published); waited < gap {
			t.Errorf("the student's last frame came %v after the first was published, within its gap of %v", waited, gap)
		}
		for want := uint64(1000); want < 1000+frames; want++ {
			next("the presenter", presenter, want)
		}
	})

	t.Run("an idle stream sends heartbeat comments", func(t *testing.T) {
		b := newTestBoard(t, func(c *Config) { c.Heartbeat = 30 * time.Millisecond }, 10)
		s := b.open(t)
		for {
			_, _, comment, err := s.next()
			if err != nil {
				t.Fatal(err)
			}
			if comment == "heartbeat" {
				return
			}
		}
	})

	t.Run("beyond maxStreams a viewer is refused; a slot frees when a viewer leaves", func(t *testing.T) {
		b := newTestBoard(t, nil, 2)
		a := b.open(t)
		b.open(t)
		waitUntil(t, "two viewers", func() bool { return b.Viewers() == 2 })
		if third := b.open(t); third.res.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("third stream: %d", third.res.StatusCode)
		}
		a.close()
		waitUntil(t, "the first viewer to leave", func() bool { return b.Viewers() == 1 })
		if again := b.open(t); again.res.StatusCode != http.StatusOK {
			t.Fatalf("after a viewer left: %d", again.res.StatusCode)
		}
	})

	t.Run("a viewer that stops reading is dropped and never holds up the board", func(t *testing.T) {
		b := newTestBoard(t, func(c *Config) { c.WriteTimeout = 100 * time.Millisecond }, 10)
		s := b.open(t, "Last-Event-ID", "0")
		waitUntil(t, "the viewer to be connected", func() bool { return b.Viewers() == 1 })
		// Never read s. Hand it far more than a socket buffers: 3,000
		// frames of 8 KiB, as if the page had changed 3,000 times.
		big := templ.Raw(strings.Repeat("x", 8<<10))
		start := time.Now()
		for i := range uint64(3000) {
			b.mu.Lock()
			b.addFrameLocked(i+1, false, []templ.Component{big})
			b.mu.Unlock()
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("producing 3,000 frames took %s with a stuck viewer", d)
		}
		waitUntil(t, "the stuck viewer to be dropped", func() bool { return b.Viewers() == 0 })
		_, _ = io.Copy(io.Discard, s.res.Body) // the board closed it
	})

	t.Run("closing ends at once the streams whose viewers stopped reading", func(t *testing.T) {
		// Their writes would wait an hour: closing must not.
		b := newTestBoard(t, func(c *Config) { c.WriteTimeout = time.Hour }, 100)
		const stalled = 20
		for range stalled {
			b.open(t, "Last-Event-ID", "0") // never read
		}
		waitUntil(t, "the viewers to be connected", func() bool { return b.Viewers() == stalled })
		// Far more than the sockets buffer, so that every stream is
		// blocked in a write.
		big := templ.Raw(strings.Repeat("x", 64<<10))
		for i := range uint64(200) {
			b.mu.Lock()
			b.addFrameLocked(i+1, false, []templ.Component{big})
			b.mu.Unlock()
			if i%20 == 19 {
				waitUntil(t, "a wake", func() bool { b.mu.Lock(); defer b.mu.Unlock(); return b.pulsed.Load() == b.frames })
			}
		}
		b.hub.Close()
		waitUntil(t, "every stream to end", func() bool { return b.Viewers() == 0 })
		if s := b.open(t); s.res.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("a viewer of a closed board: %d", s.res.StatusCode)
		}
	})

	t.Run("with nobody watching, events are applied but never rendered; a viewer resuming later gets them", func(t *testing.T) {
		b := newTestBoard(t, nil, 10)
		since := b.hub.LastSeq()
		for _, e := range paymentEvents(1) {
			b.hub.Publish(e)
		}
		b.caughtUp(t)
		b.mu.Lock()
		for i := range b.held() {
			if f := b.at(i); f.render.sse != nil {
				t.Errorf("frame %d was rendered with no viewer", f.seq)
			}
		}
		b.mu.Unlock()
		s := b.open(t, "Last-Event-ID", live.EventID(b.hub.Epoch(), since))
		var all strings.Builder
		for !strings.Contains(all.String(), "201 paid") {
			_, data, _, err := s.next()
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(data, `id="keys-body"`) && strings.Contains(data, `id="timeline"`) {
				t.Fatal("the viewer was redrawn instead of resumed")
			}
			all.WriteString(data)
		}
	})

	t.Run("a stream catching up takes at most maxBatch frames per write", func(t *testing.T) {
		b := newTestBoard(t, nil, 10)
		b.mu.Lock()
		start := b.frames
		for i := range uint64(3 * maxBatch) {
			b.addFrameLocked(i+1, false, []templ.Component{templ.Raw("x")})
		}
		b.mu.Unlock()
		// The viewers are woken within a fan-out interval; then a stream
		// that is behind takes one batch.
		waitUntil(t, "the wake", func() bool { return b.pulsed.Load() == start+3*maxBatch })
		b.mu.Lock()
		frames, ok := b.framesAfterLocked(start, b.pulseN)
		b.mu.Unlock()
		if !ok || len(frames) != maxBatch || frames[0].n != start+1 {
			t.Fatalf("%d frames (ok %v), want %d from %d", len(frames), ok, maxBatch, start+1)
		}
	})
}

func TestBoardModel(t *testing.T) {
	t.Run("the board's memory of orders and charge ids is bounded", func(t *testing.T) {
		b := newTestBoard(t, nil, 10)
		n := liveOrderLimit + 500
		for i := range n {
			b.hub.Publish(live.Event{Kind: live.Charged, Scope: "s", Key: fmt.Sprint("k-", i),
				OrderID: fmt.Sprint("O-", i), Amount: 100, Charge: fmt.Sprintf("ch_%024x", i)})
			if i%500 == 499 {
				b.caughtUp(t)
			}
		}
		b.caughtUp(t)
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.orders.len() > liveOrderLimit || b.seen.len() > liveSeenLimit {
			t.Fatalf("%d orders, %d charge ids held", b.orders.len(), b.seen.len())
		}
		// Every order was charged once: the count of such orders forgets
		// the orders forgotten, and no other.
		if b.onceN != b.orders.len() || b.orders.len() < liveOrderLimit/2 {
			t.Fatalf("%d orders held, %d of them counted as charged once", b.orders.len(), b.onceN)
		}
		if b.counters.Charges != n {
			t.Fatalf("%d charges counted, want %d", b.counters.Charges, n)
		}
	})

	t.Run("a flood of events switches to busy mode, then back, redrawing the tables", func(t *testing.T) {
		// The board's wall clock is held, so that the flood is one instant
		// however long a loaded machine takes to publish it.
		wall := newHeldWall()
		b := newTestBoard(t, func(c *Config) {
			c.Wall, c.After = wall.Now, wall.After
			c.Hub.SetWall(wall.Now)
		}, 10)
		// 300 payments' events within a second, in bursts the ring holds,
		// from a class of callers: one caller's flood is another matter
		// (shares.go).
		for i := range 300 {
			for _, e := range paymentEvents(i) {
				e.Scope = fmt.Sprintf("session:board-%d", i%64)
				b.hub.Publish(e)
			}
			if i%50 == 49 {
				b.caughtUp(t)
			}
		}
		if !b.busyFlag.Load() {
			t.Fatal("1,800 events at once did not switch to busy mode")
		}
		l := b.Snapshot()
		if l.Counters.Requests != 300 || l.Counters.Charges != 300 {
			t.Errorf("busy mode lost count: %+v", l.Counters)
		}
		if l.Timeline[0].Title != "Busy" {
			t.Errorf("no busy row on top: %v", outcomes(l.Timeline))
		}
		b.mu.Lock()
		drawn := b.frames
		b.mu.Unlock()
		if drawn > 400 {
			t.Errorf("%d of 1,800 events were drawn while busy", drawn)
		}
		// Quiet now: within a couple of refreshes it redraws and leaves.
		wall.advance(2 * time.Second)
		waitUntil(t, "busy mode to end", func() bool { return !b.busyFlag.Load() })
		b.caughtUp(t)
		b.mu.Lock()
		newest := b.at(b.held() - 1)
		b.mu.Unlock()
		for _, want := range []string{`id="keys-body"`, `id="charges-body"`, `id="counters"`, "-note"} {
			if newest.seq != b.hub.LastSeq() || !strings.Contains(string(newest.sse()), want) {
				t.Fatalf("busy mode ended without redrawing %s", want)
			}
		}
		if !strings.Contains(b.Snapshot().Timeline[0].Outcome.Text, "requests not drawn") {
			t.Error("the busy row does not say how many requests it stood for")
		}
	})

	t.Run("in busy mode the presenter's payments are still drawn one by one, and nobody else's", func(t *testing.T) {
		b := newTestBoard(t, nil, 10)
		// A class busy enough for busy mode, each caller within its
		// share, and among its payments the presenter's, one in ten.
		presenter := 0
		for i := range 300 {
			for _, e := range paymentEvents(i) {
				e.Scope = fmt.Sprintf("session:board-%d", i%64)
				if i%10 == 9 {
					e.Scope, e.Priority, e.OrderID = "session:presenter", true, fmt.Sprintf("PR-%d", i)
				}
				b.hub.Publish(e)
			}
			if i%10 == 9 {
				presenter++
			}
			if i%50 == 49 {
				b.caughtUp(t)
			}
		}
		b.caughtUp(t)
		if !b.busyFlag.Load() {
			t.Fatal("1,800 events at once did not switch to busy mode")
		}
		l := b.Snapshot()
		drawn := map[string]bool{}
		others := 0
		busyAt := -1
		for i, r := range l.Timeline {
			switch {
			case r.Title == "Busy":
				busyAt = i
			case strings.HasPrefix(r.OrderID, "PR-"):
				drawn[r.OrderID] = r.Outcome.Text != ""
			case busyAt >= 0:
			default:
				others++
			}
		}
		if busyAt < 0 {
			t.Fatalf("no busy row: %v", outcomes(l.Timeline))
		}
		// Every presenter's payment after busy mode began is drawn
		// whole, above the busy row; nobody else's is.
		for i := 9; i < 300; i += 10 {
			order := fmt.Sprintf("PR-%d", i)
			if done, ok := drawn[order]; ok && !done {
				t.Errorf("the presenter's payment %s is drawn without its outcome", order)
			}
		}
		for i := 299; i > 100; i -= 10 {
			if _, ok := drawn[fmt.Sprintf("PR-%d", i)]; !ok {
				t.Errorf("the presenter's payment PR-%d, paid while the board was busy, is not drawn: %v", i, outcomes(l.Timeline))
				break
			}
		}
		if others > 0 {
			t.Errorf("%d of the class's payments were drawn above the busy row: %v", others, outcomes(l.Timeline))
		}
	})

	t.Run("one caller's flood is counted in a row of its own, the board does not go busy, and another caller's payment is drawn", func(t *testing.T) {
		b := newTestBoard(t, nil, 10)
		const flood = 400
		for i := range flood {
			for _, e := range paymentEvents(i) {
				e.Scope = "session:flood"
				b.hub.Publish(e)
			}
			if i%50 == 49 {
				b.caughtUp(t)
			}
		}
		for _, e := range paymentEvents(flood) {
			e.Scope, e.Request, e.OrderID = "session:quiet", "rq_quiet", "Q-1"
			b.hub.Publish(e)
		}
		b.caughtUp(t)
		if b.busyFlag.Load() {
			t.Fatal("one caller's flood put the board in busy mode")
		}
		l := b.Snapshot()
		if l.Counters.Requests != flood+1 || l.Counters.Charges != flood+1 {
			t.Errorf("the counters are not complete: %+v", l.Counters)
		}
		if l.Timeline[0].OrderID != "Q-1" || l.Timeline[0].Outcome.Text == "" {
			t.Fatalf("the other caller's payment is not drawn on top: %v", outcomes(l.Timeline))
		}
		var share *views.TimelineRow
		for i, r := range l.Timeline {
			if r.Title == "One caller, too fast" {
				share = &l.Timeline[i]
			}
		}
		if share == nil || !strings.Contains(share.Outcome.Text, "requests not drawn") {
			t.Fatalf("no row stands for the flood: %v", outcomes(l.Timeline))
		}
		if n, _ := strconv.Atoi(strings.Fields(share.Outcome.Text)[0]); n < flood-2*shareRequests || n >= flood {
			t.Errorf("the flood's row counts %d requests not drawn of %d", n, flood)
		}
	})

	t.Run("one address flooding under a new token per request is counted in one row, the board does not go busy, and the class's payments are drawn", func(t *testing.T) {
		b := newTestBoard(t, nil, 10)
		const flood = 400
		for i := range flood {
			for _, e := range paymentEvents(i) {
				e.Scope, e.Source = fmt.Sprintf("token:mint-%d", i), "192.0.2.66"
				b.hub.Publish(e)
			}
			if i%50 == 49 {
				b.caughtUp(t)
			}
		}
		// Ten students of a class behind another address pay at once.
		for i := range 10 {
			for _, e := range paymentEvents(flood + i) {
				e.Scope, e.Source = fmt.Sprintf("session:class-%d", i), "192.0.2.10"
				b.hub.Publish(e)
			}
		}
		b.caughtUp(t)
		if b.busyFlag.Load() {
			t.Fatal("one address's flood under ever new tokens put the board in busy mode")
		}
		l := b.Snapshot()
		if l.Counters.Requests != flood+10 || l.Counters.Charges != flood+10 {
			t.Errorf("the counters are not complete: %+v", l.Counters)
		}
		drawn := map[string]bool{}
		var share *views.TimelineRow
		for i, r := range l.Timeline {
			drawn[r.OrderID] = true
			if r.Title == "One address, too fast" {
				share = &l.Timeline[i]
			}
		}
		for i := range 10 {
			if order := fmt.Sprintf("B-%d", flood+i); !drawn[order] {
				t.Errorf("the class's payment %s is not drawn: %v", order, outcomes(l.Timeline))
			}
		}
		if share == nil {
			t.Fatalf("no row stands for the address's flood: %v", outcomes(l.Timeline))
		}
		if n, _ := strconv.Atoi(strings.Fields(share.Outcome.Text)[0]); n < flood-2*addressShareRequests || n >= flood {
			t.Errorf("the address's row counts %d requests not drawn of %d", n, flood)
		}
	})

	t.Run("an order paid with two keys is counted as charged twice, and only the second charge is marked", func(t *testing.T) {
		b := newTestBoard(t, nil, 10)
		for i, key := range []string{"k-1", "k-2"} {
			b.hub.Publish(live.Event{Kind: live.Charged, Scope: "s", Key: key, OrderID: "A-7", Amount: 100, Charge: fmt.Sprintf("ch_%024x", i)})
		}
		l := b.caughtUp(t).Snapshot()
		if l.Counters.Twice != 1 || len(l.Counters.Orders) != 1 || l.Counters.Orders[0].Charges != 2 {
			t.Fatalf("counters %+v", l.Counters)
		}
		if !l.Charges[0].Repeat || l.Charges[1].Repeat {
			t.Fatalf("only the second charge should be marked: %+v", l.Charges)
		}
	})
}

// The busy-mode ticker runs only while busy, keeps the board busy while
// events still come fast, stops when busy mode ends and starts again with
// the next flood. The wall clock stands still during a flood and moves on
// by hand; the test ticks the ticker itself.
func TestBusyTicker(t *testing.T) {
	var mu sync.Mutex
	wall := time.Date(2026, 12, 4, 9, 0, 0, 0, time.UTC)
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return wall }
	ticks := make(chan time.Time)
	var every atomic.Int64
	b := newTestBoard(t, func(c *Config) {
		c.Wall = now
		c.Ticks = func(d time.Duration) (<-chan time.Time, func()) {
			every.Store(int64(d))
			return ticks, func() {}
		}
	}, 10)
	// tick is one refresh: the ticker takes a tick only between two
	// refreshes, so the second send returns once the first has run.
	tick := func(what string) {
		t.Helper()
		for range 2 {
			select {
			case ticks <- now():
			case <-time.After(2 * time.Minute): // a bound only a broken board reaches
				t.Fatalf("%s: the ticker took no tick in two minutes", what)
			}
		}
	}
	if b.ticking.Load() {
		t.Fatal("the ticker runs before any event")
	}
	for round := range 2 {
		for i := range 300 {
			for _, e := range paymentEvents(round*300 + i) {
				e.Scope = fmt.Sprintf("session:board-%d", i%64)
				b.hub.Publish(e)
			}
			if i%50 == 49 {
				b.caughtUp(t)
			}
		}
		if !b.busyFlag.Load() {
			t.Fatalf("round %d: the flood did not switch to busy mode", round)
		}
		waitUntil(t, "the ticker to start", func() bool { return b.tickerRuns.Load() > uint64(round) })
		if d := time.Duration(every.Load()); d != busyRefresh {
			t.Fatalf("the ticker ticks every %v, want busyRefresh (%v)", d, busyRefresh)
		}
		tick("while the flood is under a second old")
		if !b.busyFlag.Load() || !b.ticking.Load() {
			t.Fatalf("round %d: busy mode ended (busy %v, ticking %v) while the flood was under a second old", round, b.busyFlag.Load(), b.ticking.Load())
		}
		// Two seconds on, the flood is over. The second refresh above may
		// still be running, and may read the new time and end busy mode
		// itself: the ticker is then no longer listening, so the next tick
		// is offered, not forced.
		mu.Lock()
		wall = wall.Add(2 * time.Second)
		mu.Unlock()
		waitUntil(t, "busy mode to end", func() bool {
			select {
			case ticks <- now():
			default:
			}
			return !b.busyFlag.Load()
		})
		waitUntil(t, "the ticker to stop", func() bool { return !b.ticking.Load() })
	}
}

// TestMutedRowsAreBounded: every new caller over its share (a bearer token
// in a loop) gets a row of its own on the timeline; the board keeps at
// most shareMaxRows of them between two resets, not one per caller ever
// seen, and the newest caller's row is still drawn and counted.
func TestMutedRowsAreBounded(t *testing.T) {
	// The wall clock stands still while one caller sends its burst, and
	// moves on a second and more between two callers: each is over its
	// burst share, and the board as a whole never goes busy. Nobody
	// watches, so the board takes events in batches: short ones, as the
	// test waits for it to catch up after each of 180 callers.
	var mu sync.Mutex
	wall := time.Date(2026, 12, 4, 9, 0, 0, 0, time.UTC)
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return wall }
	b := newTestBoard(t, func(c *Config) { c.Wall = now; c.Batch = time.Millisecond }, 10)
	const callers, each = 3 * shareMaxRows, shareBurst + 3
	for c := range callers {
		scope := fmt.Sprintf("token:flood-%d", c)
		for i := range each {
			b.hub.Publish(live.Event{Kind: live.Received, Scope: scope, Request: fmt.Sprintf("rq_%d_%d", c, i),
				Key: fmt.Sprintf("k-%d-%d", c, i), OrderID: fmt.Sprintf("O-%d-%d", c, i), Amount: 100})
		}
		b.caughtUp(t)
		mu.Lock()
		wall = wall.Add(1100 * time.Millisecond)
		mu.Unlock()
	}
	if b.busyFlag.Load() {
		t.Fatal("the board went busy: the callers' rows were not drawn")
	}
	b.mu.Lock()
	rows := len(b.shares.rows)
	last := b.shares.rows[fmt.Sprintf("token:flood-%d", callers-1)]
	b.mu.Unlock()
	if rows > shareMaxRows {
		t.Fatalf("%d callers over their share left %d rows kept, want at most %d", callers, rows, shareMaxRows)
	}
	if last == nil || last.n != each-shareBurst {
		t.Fatalf("the newest caller over its share has no row counting its %d requests not drawn: %+v", each-shareBurst, last)
	}
	if l := b.Snapshot(); l.Timeline[0].Title != "One caller, too fast" || l.Timeline[0].Scope != fmt.Sprintf("token:flood-%d", callers-1) {
		t.Fatalf("the newest caller's row is not on top: %+v", l.Timeline[0])
	}
}

// TestSharesPaceByArrival: a board that draws a backlog at once (after a
// stall, or on a loaded machine) meters each address by when its requests
// arrived, not by when it draws them. Forty students behind one address
// paying over two seconds are all drawn, though the board draws them in
// one instant; forty requests that did arrive in one instant are over the
// address's share.
func TestSharesPaceByArrival(t *testing.T) {
	start := time.Date(2026, 12, 4, 9, 0, 0, 0, time.UTC)
	late := start.Add(3 * time.Second)
	const students = 40
	// addressRows draws forty students' payments from one address, at the
	// times arrived gives, in one instant of the board's, and counts the
	// rows standing for an address over its share.
	addressRows := func(arrived func(i int) time.Time) (int, []string) {
		b := newTestBoard(t, func(c *Config) { c.Wall = func() time.Time { return late } }, 10)
		for i := range students {
			for _, e := range paymentEvents(i) {
				e.Scope, e.Source, e.Arrived = fmt.Sprintf("session:s-%d", i), "192.0.2.10", arrived(i)
				b.hub.Publish(e)
			}
		}
		b.caughtUp(t)
		l := b.Snapshot()
		n := 0
		for _, r := range l.Timeline {
			if r.Title == "One address, too fast" {
				n++
			}
		}
		return n, outcomes(l.Timeline)
	}
	if n, rows := addressRows(func(i int) time.Time { return start.Add(time.Duration(i) * 50 * time.Millisecond) }); n != 0 {
		t.Errorf("forty payments over two seconds, drawn in one instant, were counted as one address too fast: %v", rows)
	}
	if n, rows := addressRows(func(int) time.Time { return late }); n != 1 {
		t.Errorf("forty payments arriving in one instant from one address: %d rows for the address, want 1: %v", n, rows)
	}
}

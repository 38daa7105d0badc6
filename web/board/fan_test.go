package board

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/a-h/templ"

	"paytwice/web/live"
)

// TestAPageThatStopsReadingHoldsUpNoOther: the pages that are up to date
// are written one after the other by the board's fan writer (fan.go). A
// page that stops reading, its socket full, must not hold up the others:
// they get every frame while it reads nothing, it leaves the fan writer
// to wait on its own, and when it reads again it gets every frame, in
// order, with nothing lost or doubled from the write that did not fit.
func TestAPageThatStopsReadingHoldsUpNoOther(t *testing.T) {
	// The stalled page's own write waits far longer than the test.
	b := newTestBoard(t, func(c *Config) { c.WriteTimeout = 10 * time.Minute }, 10)

	// The stalled page: a connection that sends its request and reads
	// nothing until told.
	stalled, err := net.Dial("tcp", strings.TrimPrefix(b.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stalled.Close() })
	if _, err := fmt.Fprintf(stalled, "GET / HTTP/1.1\r\nHost: board\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	const readers = 3
	pages := []*stream{}
	for range readers {
		pages = append(pages, b.open(t))
	}
	waitUntil(t, "the pages to be open", func() bool { return b.Viewers() == readers+1 })
	// attached counts the pages the fan writer writes. The writer holds
	// its lock while it writes: one that waited on a page would hold it
	// for good, so it is taken within a bound.
	attached := func() int {
		t.Helper()
		for deadline := time.Now().Add(2 * time.Minute); !b.fan.mu.TryLock(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the fan writer was busy for 2 minutes: its writes wait for a page")
			}
		}
		defer b.fan.mu.Unlock()
		return len(b.fan.pages)
	}
	waitUntil(t, "every page to be written by the fan writer", func() bool { return attached() == readers+1 })

	// Frames of 160 KB each, published one wake at a time until the
	// stalled page's socket and the server's side of it hold no more
	// (4 MB at most each on Linux by default) and the fan writer handed
	// it back, then a few more. The reading pages take gzip, so theirs
	// are small.
	body := strings.Repeat("x", 160<<10)
	publish := func(i uint64) {
		b.mu.Lock()
		b.addFrameLocked(1000+i, false, []templ.Component{templ.Raw(fmt.Sprintf("<p>frame %d %s</p>", i, body))})
		b.mu.Unlock()
		waitUntil(t, "a wake", func() bool { b.mu.Lock(); defer b.mu.Unlock(); return b.pulsed.Load() == b.frames })
	}
	// The reading pages read throughout, each saying which frames it got.
	type got struct {
		page int
		id   uint64
		err  error
	}
	seen := make(chan got, 4096)
	for i, s := range pages {
		go func() {
			for {
				id, data, _, err := s.next()
				if err != nil {
					seen <- got{i, 0, err}
					return
				}
				if strings.Contains(data, "<p>frame ") {
					seen <- got{i, id, nil}
				}
			}
		}()
	}
	frames := uint64(0)
	for ; frames < 200 && attached() == readers+1; frames++ {
		publish(frames)
	}
	if attached() == readers+1 {
		t.Fatalf("the page that reads nothing was still written by the fan writer after %d frames of %d KB", frames, len(body)>>10)
	}
	for range 8 {
		publish(frames)
		frames++
	}
	bound := time.NewTimer(2 * time.Minute)
	defer bound.Stop()
	next := make([]uint64, readers) // the frame each reading page is to get next
	for i := range next {
		next[i] = 1000
	}
	for left := readers; left > 0; {
		select {
		case g := <-seen:
			if g.err != nil {
				t.Fatalf("page %d: %v after frame %d", g.page, g.err, next[g.page]-1)
			}
			if g.id != next[g.page] {
				t.Fatalf("page %d got frame %d, want %d", g.page, g.id, next[g.page])
			}
			if next[g.page]++; next[g.page] == 1000+frames {
				left--
			}
		case <-bound.C:
			t.Fatalf("the reading pages did not get every frame within 2 minutes while one page read nothing: they are at %v of %d", next, 1000+frames)
		}
	}
	if n := attached(); n != readers {
		t.Errorf("%d pages with the fan writer, want the %d that read: the stalled one was not handed back", n, readers)
	}

	// The stalled page reads again: every frame, in order, once each.
	res, err := http.ReadResponse(bufio.NewReader(stalled), nil)
	if err != nil {
		t.Fatal(err)
	}
	s := &stream{res: res, r: bufio.NewReader(res.Body), cancel: func() {}}
	read := make(chan error, 1)
	go func() {
		want := uint64(1000)
		for want < 1000+frames {
			id, data, _, err := s.next()
			if err != nil {
				read <- fmt.Errorf("after frame %d: %v", want-1, err)
				return
			}
			if !strings.Contains(data, "<p>frame ") {
				continue // the first drawing, or a heartbeat
			}
			if id != want || !strings.HasPrefix(data, fmt.Sprintf("<p>frame %d %s</p>", want-1000, body)) {
				read <- fmt.Errorf("got frame %d (%.40q…), want %d", id, data, want)
				return
			}
			want++
		}
		read <- nil
	}()
	select {
	case err := <-read:
		if err != nil {
			t.Fatalf("the page that read again: %v", err)
		}
	case <-bound.C:
		t.Fatal("the page that read again did not get every frame within 2 minutes")
	}
	waitUntil(t, "the page that read again to be written by the fan writer again", func() bool { return attached() == readers+1 })
}

// phone is a page that dials the board itself, so that the test can look
// at its socket between the fan writer's rounds.
type phone struct {
	conn net.Conn
	*stream
}

// openRaw opens a page of the board as the given viewer (testViewer's
// headers) and reads its answer's head and its first drawing.
func (b *testBoard) openRaw(t *testing.T, header ...string) *phone {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(b.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	req := "GET / HTTP/1.1\r\nHost: board\r\n"
	for i := 0; i+1 < len(header); i += 2 {
		req += header[i] + ": " + header[i+1] + "\r\n"
	}
	if _, err := io.WriteString(conn, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := &phone{conn: conn, stream: &stream{res: res, r: br, cancel: func() {}}}
	if _, data, _, err := p.next(); err != nil || !strings.Contains(data, `id="timeline"`) {
		t.Fatalf("the page's first drawing: %q, %v", data, err)
	}
	return p
}

// waiting says whether the page has bytes it has not read, in its reader
// or its socket, without waiting for any.
func (p *phone) waiting(t *testing.T) bool {
	t.Helper()
	if p.r.Buffered() > 0 {
		return true
	}
	raw, err := p.conn.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	if err := raw.Read(func(fd uintptr) bool {
		n, _, _ = syscall.Recvfrom(int(fd), make([]byte, 1), syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// testViewer is Config.Viewer by headers: X-Scope names the page's
// caller, X-Board makes it a board.
func testViewer(r *http.Request) (string, bool) {
	return r.Header.Get("X-Scope"), r.Header.Get("X-Board") != ""
}

// payOf is one payment's events, paid by scope.
func payOf(i int, scope string, priority bool) []live.Event {
	events := paymentEvents(i)
	for j := range events {
		events[j].Scope, events[j].Priority = scope, priority
	}
	return events
}

// TestAPhoneGetsTheClassInRoundsAndItsOwnAtOnce: with hundreds of pages
// open, a phone is written the class's payments in rounds, its own
// caller's payments and the presenter's as they happen, as the board is
// written everything (fan.go). Here the class's round never comes: the
// board shows another student's payment while the phone has been sent
// nothing; the presenter's payment reaches the phone at once; and when
// the phone's own payment comes, it gets the other student's first, then
// its own, every frame in order.
func TestAPhoneGetsTheClassInRoundsAndItsOwnAtOnce(t *testing.T) {
	b := newTestBoard(t, func(c *Config) { c.Viewer = testViewer; c.Heartbeat = time.Hour }, 10)
	b.fan.classInterval = func() time.Duration { return time.Hour }
	board, alice := openBoardAndPhone(t, b)
	// seenBy reads page p until key's row shows done, and returns the
	// ids of the frames read.
	seenBy := func(p *phone, key string) []uint64 {
		t.Helper()
		var ids []uint64
		for {
			id, data, _, err := p.next()
			if err != nil {
				t.Fatalf("reading until %s is done: %v", key, err)
			}
			if id != 0 {
				ids = append(ids, id)
			}
			if strings.Contains(data, `<code title="`+key+`"`) && strings.Contains(data, `class="key-done"`) {
				return ids
			}
		}
	}
	// roundDone waits for the fan writer's round that wrote the board to
	// end: the writer holds its lock for a whole round.
	roundDone := func() {
		b.fan.mu.Lock()
		//lint:ignore SA2001 taking the lock is the wait: nothing is read under it
		b.fan.mu.Unlock()
	}

	for _, e := range payOf(1, "token:bob", false) {
		b.hub.Publish(e)
	}
	seenBy(board, "board-key-1")
	roundDone()
	if alice.waiting(t) {
		id, data, c, err := alice.next()
		t.Fatalf("alice's phone was written bob's payment before the class's round: %d %q %q %v", id, data, c, err)
	}

	// The presenter's payment goes to every page at once: the phone gets
	// what it lacks of the class first.
	for _, e := range payOf(2, "presenter", true) {
		b.hub.Publish(e)
	}
	seenBy(board, "board-key-2")
	ids := seenBy(alice, "board-key-1")
	ids = append(ids, seenBy(alice, "board-key-2")...)

	// Another of bob's, not sent; then alice's own, sent at once with
	// bob's before it.
	for _, e := range payOf(3, "token:bob", false) {
		b.hub.Publish(e)
	}
	seenBy(board, "board-key-3")
	roundDone()
	if alice.waiting(t) {
		t.Fatal("alice's phone was written bob's second payment before the class's round")
	}
	for _, e := range payOf(4, "token:alice", false) {
		b.hub.Publish(e)
	}
	seenBy(board, "board-key-4")
	ids = append(ids, seenBy(alice, "board-key-3")...)
	ids = append(ids, seenBy(alice, "board-key-4")...)
	for i := 1; i < len(ids); i++ {
		if ids[i] <= ids[i-1] {
			t.Fatalf("alice's phone got frames %v: not in order", ids)
		}
	}
}

// openBoardAndPhone opens the board and alice's phone, and waits for the
// fan writer to write both.
func openBoardAndPhone(t *testing.T, b *testBoard) (board, alice *phone) {
	t.Helper()
	board = b.openRaw(t, "X-Board", "1")
	alice = b.openRaw(t, "X-Scope", "token:alice")
	waitUntil(t, "both pages to be written by the fan writer", func() bool {
		b.fan.mu.Lock()
		defer b.fan.mu.Unlock()
		return len(b.fan.pages) == 2
	})
	return board, alice
}

// TestAPhoneGetsTheClassRoundWithoutAWake: a phone that lacks the class's
// payments gets them within the class's interval even when nothing more
// happens, by the fan writer's own timer.
func TestAPhoneGetsTheClassRoundWithoutAWake(t *testing.T) {
	b := newTestBoard(t, func(c *Config) { c.Viewer = testViewer; c.Heartbeat = time.Hour }, 10)
	b.fan.classInterval = func() time.Duration { return 50 * time.Millisecond }
	b.fan.interval = func() time.Duration { return time.Millisecond }
	board, alice := openBoardAndPhone(t, b)
	for _, e := range payOf(1, "token:bob", false) {
		b.hub.Publish(e)
	}
	for _, p := range []*phone{board, alice} {
		done := make(chan error, 1)
		go func() {
			for {
				_, data, _, err := p.next()
				if err != nil || strings.Contains(data, `class="key-done"`) {
					done <- err
					return
				}
			}
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(2 * time.Minute):
			t.Fatal("bob's payment did not reach a page within 2 minutes")
		}
	}
}

// TestTheClassRoundIsTheWakeNearestItsInterval: with wakes a fan-out
// interval (100 ms) apart and a class round due every 300 ms, the round
// is made at the third wake after the last, whichever side of 300 ms it
// falls on, and not at the wakes before it. A round made only once the
// interval had passed skipped a wake that came a few milliseconds early
// and made the round by its timer with that wake's payments a round late
// for the phones.
func TestTheClassRoundIsTheWakeNearestItsInterval(t *testing.T) {
	start := time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC)
	now := start
	f := &fanWriter{
		interval:      func() time.Duration { return 100 * time.Millisecond },
		classInterval: func() time.Duration { return 300 * time.Millisecond },
		clock:         func() time.Time { return now },
		lastClass:     start,
	}
	// The wakes' times after the last round, and whether each is a round:
	// wakes drift a little either way from their interval.
	for i, step := range []struct {
		at    time.Duration
		class bool
	}{
		{99 * time.Millisecond, false},
		{201 * time.Millisecond, false},
		{297 * time.Millisecond, true}, // three wakes, 3 ms early: the round
		{398 * time.Millisecond, false},
		{497 * time.Millisecond, false},
		{604 * time.Millisecond, true}, // 307 ms after the last round
		{703 * time.Millisecond, false},
	} {
		now = start.Add(step.at)
		f.roundFor(&wake{id: uint64(i + 1), frames: []frame{{owner: "token:bob"}}}, false)
		if f.round.class != step.class {
			t.Fatalf("the wake at %v: class round %v, want %v", step.at, f.round.class, step.class)
		}
		f.endRoundLocked()
	}
}

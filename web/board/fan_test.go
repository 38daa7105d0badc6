package board

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/a-h/templ"
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

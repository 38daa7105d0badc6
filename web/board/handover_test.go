package board

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/a-h/templ"
)

// TestAnAttachedPageOutlivesItsStreamsWriteTimeout: a page the fan writer
// writes stays with the writer for as long as it reads, however long past
// the write timeout of its stream's own writes. The stream's deadline is
// lifted as it hands the page over (eventStream.handOver); left in place,
// it failed the writer's first send after it passed, and the page went
// back to its stream and was taken again, every WriteTimeout.
func TestAnAttachedPageOutlivesItsStreamsWriteTimeout(t *testing.T) {
	t.Parallel()
	const timeout = 100 * time.Millisecond
	b := newTestBoard(t, func(c *Config) { c.WriteTimeout = timeout }, 10)
	s := b.open(t)
	attached := func() bool { b.fan.mu.Lock(); defer b.fan.mu.Unlock(); return len(b.fan.pages) == 1 }
	waitUntil(t, "the page to be written by the fan writer", attached)
	// A lower bound on the time gone by, not a wait for something: the
	// stream's own last write was at least this long ago.
	time.Sleep(3 * timeout)
	for i := range uint64(5) {
		b.mu.Lock()
		b.addFrameLocked(500+i, false, []templ.Component{templ.Raw(fmt.Sprintf("<p>frame %d</p>", i))})
		b.mu.Unlock()
		want := fmt.Sprintf("frame %d", i)
		for {
			_, data, _, err := s.next()
			if err != nil {
				t.Fatalf("reading %s: %v", want, err)
			}
			if strings.Contains(data, want) {
				break
			}
		}
	}
	if n := b.handedBack.Load(); n != 0 {
		t.Errorf("the fan writer handed the page back %d times in five frames to a page that reads them all", n)
	}
}

package board

import (
	"regexp"
	"sort"
	"testing"
	"time"
)

// doneKeyRow finds a key row drawn done in a frame, and its key.
var doneKeyRow = regexp.MustCompile(`class="key-done"[^>]*>\s*<td>\s*<code title="([^"]+)"`)

// TestABurstReachesThePagesWithNothingAfterIt: a burst of payments, then
// silence. Every key of the burst is drawn done on every open page within
// a generous bound of the last event, without any later event to carry
// it: a frame held back until something else happens would leave the
// pages showing less than the books for as long as the room stays quiet.
// The burst comes from one caller, faster than its share of the board,
// so that most of it is counted in the caller's row (shares.go), and
// from one caller within its share, drawn one by one.
func TestABurstReachesThePagesWithNothingAfterIt(t *testing.T) {
	for _, tc := range []struct {
		name     string
		payments int
	}{
		{"a caller within its share", shareBurst / 2},
		{"a caller over its share", 3 * shareBurst},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newTestBoard(t, nil, 10)
			const pages = 3
			type shown struct {
				page int
				key  string
			}
			seen := make(chan shown, 64)
			for page := range pages {
				s := b.open(t)
				if _, _, _, err := s.next(); err != nil { // the page's first drawing
					t.Fatal(err)
				}
				go func() {
					for {
						_, data, _, err := s.next()
						if err != nil {
							return
						}
						for _, m := range doneKeyRow.FindAllStringSubmatch(data, -1) {
							seen <- shown{page, m[1]}
						}
					}
				}()
			}
			waitUntil(t, "the pages to be open", func() bool { return b.Viewers() == pages })

			want := map[string]bool{}
			for i := range tc.payments {
				for _, e := range paymentEvents(i) {
					e.Scope = "token:burst"
					b.hub.Publish(e)
				}
				want[paymentEvents(i)[0].Key] = true
			}
			b.caughtUp(t)
			last := b.hub.LastSeq()

			// Nothing is published from here on.
			missing := map[int]map[string]bool{}
			for page := range pages {
				missing[page] = map[string]bool{}
				for k := range want {
					missing[page][k] = true
				}
			}
			left := pages * len(want)
			bound := time.NewTimer(5 * time.Second)
			defer bound.Stop()
			for left > 0 {
				select {
				case s := <-seen:
					if missing[s.page][s.key] {
						delete(missing[s.page], s.key)
						left--
					}
				case <-bound.C:
					for page := range pages {
						var keys []string
						for k := range missing[page] {
							keys = append(keys, k)
						}
						sort.Strings(keys)
						t.Errorf("page %d: %d of %d keys never drawn done, 5 s after the last event: %v", page, len(keys), len(want), keys)
					}
					return
				}
			}
			if got := b.hub.LastSeq(); got != last {
				t.Fatalf("events were published after the burst (%d, then %d): the test proves nothing", last, got)
			}
		})
	}
}

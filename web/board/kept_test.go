package board

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestAFloodBeforeTheBoardStartsIsOneCountedRow: a caller that paid two
// hundred times in one instant through the API before any page was open
// is drawn, when the board first starts, as a running board would have
// drawn it: its first payments within its share, then one row counting
// the rest; a student who paid afterwards keeps a row of their own.
func TestAFloodBeforeTheBoardStartsIsOneCountedRow(t *testing.T) {
	const loop, flood = "token:loop", 200
	// Every event arrived in the same instant, however long publishing
	// them takes on a loaded machine.
	instant := time.Now()
	b := newTestBoard(t, func(cfg *Config) {
		for i := range flood {
			for _, e := range paymentEvents(i) {
				e.Scope, e.Arrived = loop, instant
				cfg.Hub.Publish(e)
			}
		}
		for _, e := range paymentEvents(flood) {
			e.Scope, e.Arrived = "session:student", instant
			cfg.Hub.Publish(e)
		}
	}, 10)
	rows := b.Snapshot().Timeline
	var counted []string
	loopRows, student := 0, false
	for _, r := range rows {
		switch {
		case strings.HasPrefix(r.ID, "tl-share-"):
			counted = append(counted, r.Title+": "+r.Outcome.Text)
		case r.Scope == loop:
			loopRows++
		case r.Scope == "session:student":
			student = true
		}
	}
	want := fmt.Sprintf("One caller, too fast: %d requests not drawn", flood-shareBurst)
	if len(counted) != 1 || counted[0] != want {
		t.Errorf("the counted rows: %q, want one: %q", counted, want)
	}
	if loopRows > shareBurst {
		t.Errorf("%d of the caller's payments drawn one by one, over its share of %d", loopRows, shareBurst)
	}
	if !student {
		t.Errorf("the student's payment after the flood has no row")
	}
	if len(rows) > liveRows {
		t.Errorf("%d timeline rows, over %d", len(rows), liveRows)
	}
}

package web

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestSparseLogWritesOncePerSpell: a failure met at every board fetch is
// written once, then at most once per spell, saying how many times it
// was met meanwhile.
func TestSparseLogWritesOncePerSpell(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	var lines []string
	l := newSparseLog(func() time.Time { return now }, time.Minute, func(f string, a ...any) { lines = append(lines, fmt.Sprintf(f, a...)) })
	for range 30 { // thirty fetches in thirty seconds
		l.printf("counting: %s", "down")
		now = now.Add(time.Second)
	}
	if len(lines) != 1 || lines[0] != "counting: down" {
		t.Fatalf("thirty failures in thirty seconds wrote %q, want the one line", lines)
	}
	now = now.Add(30 * time.Second)
	l.printf("counting: %s", "down")
	if len(lines) != 2 || !strings.HasPrefix(lines[1], "counting: down (and 29 times more") {
		t.Fatalf("a minute on, the lines are %q, want a second one counting the 29 unwritten", lines)
	}
}

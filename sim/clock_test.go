package sim

import (
	"sync"
	"testing"
	"time"
)

func TestClockOffsetStaysWithinMaxOffset(t *testing.T) {
	base := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	c := NewClock(func() time.Time { return base })
	if _, ok := c.Advance(-time.Second); ok {
		t.Fatal("a negative step was taken")
	}
	// Many goroutines racing for the last hour cannot overshoot together.
	if _, ok := c.Advance(MaxOffset - time.Hour); !ok {
		t.Fatal("a step within the bound was refused")
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	taken := 0
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if _, ok := c.Advance(time.Minute); ok {
					mu.Lock()
					taken++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if taken != 60 || c.Offset() != MaxOffset || !c.Now().Equal(base.Add(MaxOffset)) {
		t.Fatalf("%d minutes taken, offset %s", taken, c.Offset())
	}
	if off, ok := c.Advance(time.Nanosecond); ok || off != MaxOffset {
		t.Fatalf("past the bound: %s %v", off, ok)
	}
	c.ResetOffset()
	if _, ok := c.Advance(MaxOffset); !ok {
		t.Fatal("after a reset the whole range is available again")
	}
}

package sim

import (
	"testing"
	"time"
)

func TestClockOffsetStaysWithinMaxOffset(t *testing.T) {
	if off, ok := AdvanceOffset(time.Hour, -time.Second); ok || off != time.Hour {
		t.Fatalf("a negative step was taken: %s %v", off, ok)
	}
	off, ok := AdvanceOffset(0, MaxOffset-time.Hour)
	if !ok || off != MaxOffset-time.Hour {
		t.Fatalf("a step within the bound was refused: %s %v", off, ok)
	}
	if off, ok = AdvanceOffset(off, time.Hour); !ok || off != MaxOffset {
		t.Fatalf("the last hour was refused: %s %v", off, ok)
	}
	if got, ok := AdvanceOffset(off, time.Nanosecond); ok || got != MaxOffset {
		t.Fatalf("past the bound: %s %v", got, ok)
	}
}

func TestClockReadsItsBasePlusTheOffset(t *testing.T) {
	base := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	c := NewClock(func() time.Time { return base })
	c.SetOffset(MaxOffset)
	if c.Offset() != MaxOffset || !c.Now().Equal(base.Add(MaxOffset)) {
		t.Fatalf("offset %s, now %s", c.Offset(), c.Now())
	}
	c.SetOffset(0)
	if !c.Now().Equal(base) {
		t.Fatalf("after SetOffset(0) the clock reads %s, want its base", c.Now())
	}
}

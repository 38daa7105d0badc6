package sim

import (
	"sync"
	"sync/atomic"
	"time"
)

// Clock is the server's clock: a base clock plus an offset that a
// presenter can advance to show what happens when keys expire. Everything
// that ages (key retention, the sweeper's lock timeout) reads this clock.
type Clock struct {
	base func() time.Time
	// offset is how far ahead of base the clock runs, read at every Now:
	// a fixed offset (SetOffset), or the room's (Follow).
	offset atomic.Pointer[func() time.Duration]
}

// NewClock returns a clock reading base plus its offset; nil base means
// time.Now.
func NewClock(base func() time.Time) *Clock {
	if base == nil {
		base = time.Now
	}
	c := &Clock{base: base}
	c.SetOffset(0)
	return c
}

// Now returns the current (possibly warped) time.
func (c *Clock) Now() time.Time { return c.base().Add(c.Offset()) }

// MaxOffset bounds how far ahead of its base the clock may run in total.
// A year is far past any retention or lock timeout a lesson shows, and
// far from the 292 years after which a time.Duration of nanoseconds
// wraps: unbounded, enough one-week steps would send the clock back to
// the 18th century, where no started key is ever old enough to sweep.
const MaxOffset = 365 * 24 * time.Hour

// AdvanceOffset is an offset of cur moved forward by d. It refuses (ok
// false, cur returned) a negative d or one that would put the clock more
// than MaxOffset ahead. The offset is shared by every server in the room
// (web/room.go), which checks the bound as part of its change, so
// advances on several servers at once cannot overshoot together.
func AdvanceOffset(cur, d time.Duration) (offset time.Duration, ok bool) {
	if d < 0 || d > MaxOffset-cur {
		return cur, false
	}
	return cur + d, true
}

// Offset reports how far the clock has been advanced.
func (c *Clock) Offset() time.Duration { return (*c.offset.Load())() }

// SetOffset makes the clock run d ahead of its base.
func (c *Clock) SetOffset(d time.Duration) {
	f := func() time.Duration { return d }
	c.offset.Store(&f)
}

// Follow makes the clock run offset() ahead of its base, asked at every
// reading: a server's clock follows the room's offset, decided once for
// every server of the class.
func (c *Clock) Follow(offset func() time.Duration) { c.offset.Store(&offset) }

// ManualClock is a clock that only moves when told to, for tests.
type ManualClock struct {
	mu sync.Mutex
	t  time.Time
}

// NewManualClock returns a clock stopped at t.
func NewManualClock(t time.Time) *ManualClock { return &ManualClock{t: t} }

// Now returns the clock's time.
func (m *ManualClock) Now() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.t
}

// Advance moves the clock forward by d.
func (m *ManualClock) Advance(d time.Duration) {
	m.mu.Lock()
	m.t = m.t.Add(d)
	m.mu.Unlock()
}

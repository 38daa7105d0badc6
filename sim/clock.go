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
	base   func() time.Time
	offset atomic.Int64 // nanoseconds
}

// NewClock returns a clock reading base plus its offset; nil base means
// time.Now.
func NewClock(base func() time.Time) *Clock {
	if base == nil {
		base = time.Now
	}
	return &Clock{base: base}
}

// Now returns the current (possibly warped) time.
func (c *Clock) Now() time.Time { return c.base().Add(time.Duration(c.offset.Load())) }

// MaxOffset bounds how far ahead of its base the clock may run in total.
// A year is far past any retention or lock timeout a lesson shows, and
// far from the 292 years after which a time.Duration of nanoseconds
// wraps: unbounded, enough one-week steps would send the clock back to
// the 18th century, where no started key is ever old enough to sweep.
const MaxOffset = 365 * 24 * time.Hour

// Advance moves the clock forward by d and reports the new offset. It
// refuses (ok false, the clock unchanged) a negative d or one that would
// put the clock more than MaxOffset ahead; concurrent calls cannot
// overshoot together.
func (c *Clock) Advance(d time.Duration) (offset time.Duration, ok bool) {
	for {
		cur := c.offset.Load()
		if d < 0 || int64(d) > int64(MaxOffset)-cur {
			return time.Duration(cur), false
		}
		if c.offset.CompareAndSwap(cur, cur+int64(d)) {
			return time.Duration(cur + int64(d)), true
		}
	}
}

// Offset reports how far the clock has been advanced.
func (c *Clock) Offset() time.Duration { return time.Duration(c.offset.Load()) }

// ResetOffset returns the clock to its base time.
func (c *Clock) ResetOffset() { c.offset.Store(0) }

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

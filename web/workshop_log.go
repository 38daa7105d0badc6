package web

import (
	"sync"
	"time"
)

// sparseLog writes one kind of line at most once per every: a board
// fetched every second by each of a class's screens would otherwise write
// the same failure many times a second. The line written after a quiet
// spell says how many like it went unwritten.
type sparseLog struct {
	now   func() time.Time
	every time.Duration
	logf  func(string, ...any)

	mu      sync.Mutex
	last    time.Time // when a line was last written; zero for never
	skipped int       // lines not written since
}

// sparseLogEvery is how often a workshop board's failure to count the
// books is written while it goes on.
const sparseLogEvery = time.Minute

func newSparseLog(now func() time.Time, every time.Duration, logf func(string, ...any)) *sparseLog {
	return &sparseLog{now: now, every: every, logf: logf}
}

// printf writes the line unless one was written less than every ago.
func (l *sparseLog) printf(format string, args ...any) {
	l.mu.Lock()
	now := l.now()
	if !l.last.IsZero() && now.Sub(l.last) < l.every {
		l.skipped++
		l.mu.Unlock()
		return
	}
	skipped := l.skipped
	l.last, l.skipped = now, 0
	l.mu.Unlock()
	if skipped > 0 {
		format += " (and %d times more since this was last written, %v at most apart)"
		args = append(args, skipped, l.every)
	}
	l.logf(format, args...)
}

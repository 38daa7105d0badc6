package main

import (
	"fmt"
	"runtime"
	"time"
)

// defaultTimerSlack is how late the kernel may wake a server's threads
// from a timed sleep, so that it can wake several at once. Linux's own
// default is 50µs. The Go runtime's monitor thread (sysmon) sleeps 20µs
// between its rounds while the program is busy, and a server at
// GOMAXPROCS=1, as each of three servers sharing two cores runs, has its
// only P taken from any system call that a busy kernel holds across one
// of those rounds and handed to another thread, which the first then
// waits to get back: on two cores three servers switched threads 7.3-8.9
// times a payment where one server switched 4.2-4.9. With slack the
// monitor sleeps that long at least, and a P stays with a system call
// that long before it is handed on. Three servers switched 4.4-4.9 times
// a payment with 1ms and 3.2-3.4 with 4ms, and spent 0.88x the CPU with
// 4ms that they spent with 1ms; 10ms saved a little more but not in the
// ratio of three servers to one (docs/benchmarks.md, "Timer slack"). Timers fire up to this much later,
// which nothing a server times (deadlines, retries, the relay's pauses of
// 50 ms and more, the pages' rounds of 100 ms and more) notices.
const defaultTimerSlack = 4 * time.Millisecond

// maxTimerSlack bounds -timer-slack: the runtime also preempts a
// goroutine that ran 10ms on its monitor's rounds, and more slack than
// that would let one goroutine hold a P for several of them.
const maxTimerSlack = 10 * time.Millisecond

// timerSlackChoice is the timer slack a server runs under and where it
// came from, for the log; ns 0 leaves the kernel's.
type timerSlackChoice struct {
	ns     int64
	source string // "the default", "-timer-slack", "PAYTWICE_TIMER_SLACK"
}

// chooseTimerSlack reads -timer-slack (or its variable, named by givenBy;
// "" for the default): a duration from 1µs to 10ms, or off.
func chooseTimerSlack(value, givenBy string) (timerSlackChoice, error) {
	if givenBy == "" {
		givenBy = "the default"
	}
	if value == "off" {
		return timerSlackChoice{0, givenBy}, nil
	}
	d, err := time.ParseDuration(value)
	if err != nil || d < time.Microsecond || d > maxTimerSlack {
		return timerSlackChoice{}, fmt.Errorf("-timer-slack must be a duration from 1µs to 10ms, such as 4ms, or off, not %q", value)
	}
	return timerSlackChoice{d.Nanoseconds(), givenBy}, nil
}

// timerSlackLine is the start-up log's line for the slack the server's
// threads hold (held, in nanoseconds; -1 where the system has none to
// report) and, when it is not the one chosen, why not.
func timerSlackLine(held int64, why string, c timerSlackChoice) string {
	switch {
	case held < 0:
		return "timer slack: the system's (none is set on " + runtime.GOOS + ")"
	case c.ns == 0:
		return fmt.Sprintf("timer slack: %v, as the server was started with (%s off)", time.Duration(held), c.source)
	case held != c.ns:
		return fmt.Sprintf("timer slack: %v, as the server was started with: %v was not set (%s)", time.Duration(held), time.Duration(c.ns), why)
	}
	line := fmt.Sprintf("timer slack: %v, %s", time.Duration(held), c.source)
	if c.source == "the default" {
		line += " (-timer-slack or PAYTWICE_TIMER_SLACK to change it, off to keep the slack it was started with)"
	}
	return line
}

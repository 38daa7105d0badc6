package main

import (
	"fmt"
	"runtime"
	"time"
)

// defaultTimerSlack is how late the kernel may wake the threads of a
// server that runs Go code on one P (GOMAXPROCS=1, as each of three
// servers sharing two cores runs) from a timed sleep. Linux's own default
// is 50µs. The Go runtime's monitor thread (sysmon) sleeps 20µs between
// its rounds while the program is busy and takes the P of any thread that
// stayed in one system call since the round before; with one P there is
// never an idle one to spare it, so every system call that a busy kernel
// holds across a round costs a hand-off of the only P to another thread,
// and the first then waits to get it back: on two cores three servers
// switched threads 7.6-8.7 times a payment where one server switched
// 4.2-4.9. With 4ms of slack the monitor sleeps that long at least: three
// servers switched 3.2-3.6 times and spent 183-241µs of CPU a payment
// against 271-328µs. A server on more Ps gets none by default (auto): it
// mostly has an idle P, which the monitor leaves a system call to, and in
// the lecture hall (one server, two Ps, 500 pages) the slack lowered both
// turns' CPU but raised what the pages add to a payment (0.495 against
// 0.295 ms) and their p99 by 3 ms, with no change flat out, one run each
// (docs/benchmarks.md, "Timer slack"). Timers fire up to the slack later,
// which nothing a server times (deadlines, retries, the relay's pauses of
// 50 ms and more, the pages' rounds of 100 ms and more) notices.
const defaultTimerSlack = 4 * time.Millisecond

// maxTimerSlack bounds -timer-slack: the runtime also preempts a
// goroutine that ran 10ms on its monitor's rounds, and more slack than
// that would let one goroutine hold a P for several of them.
const maxTimerSlack = 10 * time.Millisecond

// timerSlackChoice is the timer slack a server runs under and where it
// came from, for the log; ns 0 leaves the slack it was started with.
type timerSlackChoice struct {
	ns int64
	// source is "-timer-slack", "PAYTWICE_TIMER_SLACK" or, for auto,
	// what auto chose by.
	source string
	auto   bool
}

// chooseTimerSlack reads -timer-slack (or its variable, named by givenBy;
// "" for the default): auto, off, or a duration from 1µs to 10ms. Auto is
// defaultTimerSlack for a server on one P (procs, its GOMAXPROCS) and
// none otherwise.
func chooseTimerSlack(value, givenBy string, procs int) (timerSlackChoice, error) {
	switch value {
	case "auto":
		if procs == 1 {
			return timerSlackChoice{defaultTimerSlack.Nanoseconds(), "auto at GOMAXPROCS=1", true}, nil
		}
		return timerSlackChoice{0, fmt.Sprintf("auto at GOMAXPROCS=%d: it is for a server on one P", procs), true}, nil
	case "off":
		return timerSlackChoice{0, givenBy + " off", false}, nil
	}
	d, err := time.ParseDuration(value)
	if err != nil || d < time.Microsecond || d > maxTimerSlack {
		return timerSlackChoice{}, fmt.Errorf("-timer-slack must be auto, off, or a duration from 1µs to 10ms such as 4ms, not %q", value)
	}
	return timerSlackChoice{d.Nanoseconds(), givenBy, false}, nil
}

// timerSlackLine is the start-up log's line for the slack the server's
// threads hold (held, in nanoseconds; -1 where the system has none to
// report) and, when it is not the one chosen, why not.
func timerSlackLine(held int64, why string, c timerSlackChoice) string {
	switch {
	case held < 0:
		return "timer slack: the system's (none is set on " + runtime.GOOS + ")"
	case c.ns == 0:
		return fmt.Sprintf("timer slack: %v, as the server was started with (%s)", time.Duration(held), c.source)
	case held != c.ns:
		return fmt.Sprintf("timer slack: %v, as the server was started with: %v was not set (%s)", time.Duration(held), time.Duration(c.ns), why)
	}
	line := fmt.Sprintf("timer slack: %v, %s", time.Duration(held), c.source)
	if c.auto {
		line += " (-timer-slack or PAYTWICE_TIMER_SLACK to change it)"
	}
	return line
}

package main

import (
	"os"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// timerSlackExecVariable marks the environment of a server that replaced
// itself to take its timer slack, so that it never does so twice.
const timerSlackExecVariable = "PAYTWICE_TIMER_SLACK_EXEC"

// holdTimerSlack gives every thread of this process the timer slack c
// and returns the slack held, or, when that is not c's, why. A thread's
// slack is the one of the thread that created it, and the runtime starts
// its threads, its monitor among them, before main runs: so the process
// sets the slack on one thread and replaces itself from it (execve keeps
// that thread's slack, the pid, the arguments, the environment and the
// open files, a listener handed down by paytwice cluster among them). It
// does so only when it may (mayExec: the program itself, never a test
// that calls run), and at most once.
func holdTimerSlack(c timerSlackChoice, mayExec bool) (int64, string) {
	// The mark is this process's alone: nothing it starts inherits it.
	replaced := mayExec && os.Getenv(timerSlackExecVariable) != ""
	if replaced {
		os.Unsetenv(timerSlackExecVariable)
	}
	held := timerSlackHeld()
	if c.ns == 0 || held == c.ns || held < 0 {
		return held, ""
	}
	if !mayExec {
		return held, "run in another program's process"
	}
	if replaced {
		return held, "the kernel kept its own after the server replaced itself"
	}
	runtime.LockOSThread() // the slack and the execve on one thread
	defer runtime.UnlockOSThread()
	if err := unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(c.ns), 0, 0, 0); err != nil {
		return held, "prctl: " + err.Error()
	}
	env := append(os.Environ(), timerSlackExecVariable+"=1")
	err := syscall.Exec("/proc/self/exe", os.Args, env)
	// Still here: this thread has the slack, the others do not.
	unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(held), 0, 0, 0)
	return held, "the server could not replace itself: " + err.Error()
}

// timerSlackHeld is the calling thread's timer slack in nanoseconds, -1
// if the kernel does not say.
func timerSlackHeld() int64 {
	n, err := unix.PrctlRetInt(unix.PR_GET_TIMERSLACK, 0, 0, 0, 0)
	if err != nil {
		return -1
	}
	return int64(n)
}

//go:build !linux

package main

// holdTimerSlack sets nothing where the kernel has no per-thread timer
// slack to set: -1, the system's own.
func holdTimerSlack(timerSlackChoice, bool) (int64, string) { return -1, "" }

//go:build unix

package postgres_test

import (
	"syscall"
	"time"
)

// processCPU is the CPU time this process has used, user and system: on
// a shared machine it varies far less than the wall time of a round trip.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

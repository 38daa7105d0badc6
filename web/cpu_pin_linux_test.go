package web

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// pinProcess keeps every thread of this process on the given processors,
// and returns what undoes it. sched_setaffinity sets one thread's
// processors; the runtime's threads that exist are each set, and those it
// makes later inherit it from the thread that makes them.
func pinProcess(cpus ...int) (undo func(), err error) {
	var was unix.CPUSet
	if err := unix.SchedGetaffinity(0, &was); err != nil {
		return nil, err
	}
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	if err := setEveryThread(&set); err != nil {
		return nil, err
	}
	return func() { _ = setEveryThread(&was) }, nil
}

func setEveryThread(set *unix.CPUSet) error {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return err
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := unix.SchedSetaffinity(tid, set); err != nil && err != unix.ESRCH {
			return err
		}
	}
	return nil
}

// canPin says whether processes can be kept apart on this machine.
func canPin() bool {
	var set unix.CPUSet
	return unix.SchedGetaffinity(0, &set) == nil && set.Count() >= 2
}

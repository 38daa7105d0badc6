package main

import (
	"os"
	"sync"
)

// heapFloorBytes is memory the server's process holds from the start so
// that the garbage collector does not run every few megabytes. A server
// keeps about 4 MB live, and the collector starts a cycle each time the
// heap has grown by as much as is live (GOGC=100): at about 12 KB
// allocated per payment, every ~330 payments, each cycle's fixed work
// (stopping the world, scanning stacks and globals) costing the payments
// 14 µs each on PostgreSQL. Counted as live, this block makes every
// cycle wait for 16 MB more: a quarter of the cycles. It holds no
// pointers, so the collector never scans it, and it is never written, so
// the operating system gives it no memory. With a large live heap (a full
// replay cache on SQLite) it adds little.
const heapFloorBytes = 16 << 20

var (
	heapFloor     []byte
	heapFloorOnce sync.Once
)

// raiseHeapFloor allocates the floor once per process, unless the
// operator tunes the collector with GOGC or bounds the process's memory
// with GOMEMLIMIT, or the memory limit the server runs under (limit,
// main_memlimit.go) is less than eight floors: the runtime counts the
// floor against that limit, and under a tight one the collector would run
// more often, not less (at a 24 MiB limit, three times as often as
// without the floor).
func raiseHeapFloor(limit int64) {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" || limit < 8*heapFloorBytes {
		return
	}
	heapFloorOnce.Do(func() { heapFloor = make([]byte, heapFloorBytes) })
}

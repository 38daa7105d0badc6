package main

import (
	"sync"
	"testing"
)

// The heap floor is left out when the operator bounds the process's
// memory: the runtime counts the floor against GOMEMLIMIT, and under a
// tight limit the collector would run more often, not less. So it is
// when the operator sets GOGC, or a memory limit under eight floors.
func TestHeapFloorOnlyWhenTheCollectorIsNotTuned(t *testing.T) {
	for _, c := range []struct {
		gogc, limit string
		held        int64 // the limit the server runs under
		want        bool
	}{
		{"", "", defaultMemoryLimit, true},
		{"", "", noMemoryLimit, true},
		{"", "", 1 << 30, true},
		{"200", "", defaultMemoryLimit, false},
		{"", "64MiB", 64 << 20, false},
		{"", "", 64 << 20, false}, // -memory-limit 64MiB
	} {
		t.Setenv("GOGC", c.gogc)
		t.Setenv("GOMEMLIMIT", c.limit)
		heapFloor, heapFloorOnce = nil, sync.Once{}
		raiseHeapFloor(c.held)
		if got := heapFloor != nil; got != c.want {
			t.Errorf("GOGC=%q GOMEMLIMIT=%q, limit %d: a heap floor %v, want %v", c.gogc, c.limit, c.held, got, c.want)
		}
	}
	heapFloor, heapFloorOnce = nil, sync.Once{}
}

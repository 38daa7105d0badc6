package main

import (
	"sync"
	"testing"
)

// The heap floor is left out when the operator bounds the process's
// memory: the runtime counts the floor against GOMEMLIMIT, and under a
// tight limit the collector would run more often, not less. So it is
// when the operator sets GOGC.
func TestHeapFloorOnlyWhenTheCollectorIsNotTuned(t *testing.T) {
	for _, c := range []struct {
		gogc, limit string
		want        bool
	}{
		{"", "", true},
		{"200", "", false},
		{"", "64MiB", false},
	} {
		t.Setenv("GOGC", c.gogc)
		t.Setenv("GOMEMLIMIT", c.limit)
		heapFloor, heapFloorOnce = nil, sync.Once{}
		raiseHeapFloor()
		if got := heapFloor != nil; got != c.want {
			t.Errorf("GOGC=%q GOMEMLIMIT=%q: a heap floor %v, want %v", c.gogc, c.limit, got, c.want)
		}
	}
	heapFloor, heapFloorOnce = nil, sync.Once{}
}

package live

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// TestEventQueueKeepsItsEventsInOrder: a share's queue, pushed and popped
// in a seeded random order that wraps its ring, grows it and shrinks it,
// holds exactly the events a plain list would, oldest first.
func TestEventQueueKeepsItsEventsInOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(37, 1))
	var q eventQueue
	var want []uint64
	next := uint64(1)
	grew, shrank := 0, 0
	for step := range 200_000 {
		size := len(q.events)
		// Phases that fill the queue up and phases that drain it.
		push := rng.IntN(100) < 55
		if step/20_000%2 == 1 {
			push = rng.IntN(100) < 40
		}
		if push || len(want) == 0 {
			q.push(Event{Seq: next})
			want = append(want, next)
			next++
		} else {
			q.pop()
			want = want[1:]
		}
		switch {
		case len(q.events) > size:
			grew++
		case len(q.events) < size:
			shrank++
		}
		if q.len() != len(want) {
			t.Fatalf("step %d: %d events held, want %d", step, q.len(), len(want))
		}
		if step%997 == 0 || q.len() < 3 {
			got := q.appendTo(nil)
			for i := range want {
				if got[i].Seq != want[i] {
					t.Fatalf("step %d: event %d is %d, want %d", step, i, got[i].Seq, want[i])
				}
			}
		}
	}
	if grew == 0 || shrank == 0 {
		t.Fatalf("the ring grew %d times and shrank %d: the test did not reach both", grew, shrank)
	}
	if len(q.events) > 64 && q.len()*4 < len(q.events) {
		t.Fatalf("%d events in a ring of %d: it did not shrink", q.len(), len(q.events))
	}
}

// BenchmarkKeeperAdd is the hub's keeping of one event, with every share
// full, as under a class's steady payments: the oldest goes as each new
// one comes.
func BenchmarkKeeperAdd(b *testing.B) {
	k := newKeeper(4096, 32768)
	e := Event{Kind: Charged, Source: "10.0.0.1", Request: "rq_0123456789", Key: "key-0123456789", Message: "charge recorded"}
	sources := []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"}
	for i := range 4 * 4096 {
		e.Source = sources[i%4]
		k.add(&e)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		e.Source = sources[i%4]
		e.Seq = uint64(i)
		k.add(&e)
	}
}

// Keeping an event counted by its scope (a caller with no source, as
// every relayed payment's events are on the other servers) allocates
// nothing once its share exists: every server keeps every server's
// events, and naming the share afresh for each cost an allocation apiece.
func TestKeeperAddsScopedEventsWithoutAllocating(t *testing.T) {
	k := newKeeper(16, 64)
	scope := strings.Repeat("tok_", 4) // not a constant: a name built from it would be new
	e := Event{Kind: Charged, Scope: scope, Request: "rq_1", Key: "key-1"}
	k.add(&e)
	if allocs := testing.AllocsPerRun(100, func() { k.add(&e) }); allocs != 0 {
		t.Fatalf("keeping a scoped event allocated %v times, want 0", allocs)
	}
	if got := len(k.shares); got != 1 {
		t.Fatalf("%d shares for one scope's payments, want 1", got)
	}
}

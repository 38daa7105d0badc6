package store

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"paytwice/pay"
)

// The writes made under pay.WriteFirst (the presenter's) go before the
// writes queued at the writer, and a batch of others running when one
// arrives stops after the op it is on, so that it waits for one op, not
// for the queue.
func TestWritesFirstGoBeforeTheQueuedOnes(t *testing.T) {
	db, err := Open(filepath.Join(t.TempDir(), "first.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx := context.Background()

	var mu sync.Mutex
	var order []string
	record := func(name string, before func()) func(context.Context, *writeStatements) error {
		return func(context.Context, *writeStatements) error {
			if before != nil {
				before()
			}
			mu.Lock()
			defer mu.Unlock()
			order = append(order, name)
			return nil
		}
	}
	errs := make(chan error, 16)
	write := func(ctx context.Context, fn func(context.Context, *writeStatements) error) {
		go func() { errs <- db.exec(ctx, fn) }()
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		// A guard against a hang, not a measure of speed.
		deadline := time.Now().Add(time.Minute)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(time.Millisecond)
		}
	}
	collect := func(n int) []string {
		t.Helper()
		for range n {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		got := order
		order = nil
		return got
	}

	// release lets a held write go, once; a test that fails lets it go
	// too, or the writer would be held for good.
	release := func(t *testing.T, ch chan struct{}) func() {
		let := sync.OnceFunc(func() { close(ch) })
		t.Cleanup(let)
		return let
	}

	t.Run("a write that goes first is run before the writes queued before it", func(t *testing.T) {
		holding, hold := make(chan struct{}), make(chan struct{})
		letGo := release(t, hold)
		write(ctx, record("held", func() { close(holding); <-hold }))
		<-holding
		for i := range 4 {
			write(ctx, record(fmt.Sprintf("student-%d", i), nil))
		}
		waitFor("the students' writes to queue", func() bool { return len(db.ops) == 4 })
		write(pay.WriteFirst(ctx), record("presenter", nil))
		waitFor("the presenter's write to queue", func() bool { return len(db.first) == 1 })
		letGo()
		got := collect(6)
		if len(got) != 6 || got[0] != "held" || got[1] != "presenter" {
			t.Fatalf("the writes ran in the order %v, want held, then presenter, then the students", got)
		}
	})

	t.Run("a batch of others stops after the op it is on to let a write that goes first in", func(t *testing.T) {
		holding, hold := make(chan struct{}), make(chan struct{})
		letGo := release(t, hold)
		write(ctx, record("held", func() { close(holding); <-hold }))
		<-holding
		in, goOn := make(chan struct{}), make(chan struct{})
		goOnNow := release(t, goOn)
		write(ctx, record("student-0", func() { close(in); <-goOn }))
		waitFor("the first student's write to queue", func() bool { return len(db.ops) == 1 })
		for i := 1; i < 4; i++ {
			write(ctx, record(fmt.Sprintf("student-%d", i), nil))
		}
		waitFor("the students' writes to queue", func() bool { return len(db.ops) == 4 })
		letGo()
		<-in // the students' batch is on its first op
		write(pay.WriteFirst(ctx), record("presenter", nil))
		waitFor("the presenter's write to queue", func() bool { return len(db.first) == 1 })
		goOnNow()
		// The students' writes were queued from goroutines of their own:
		// their order among themselves is theirs.
		got := collect(6)
		if len(got) != 6 || !slices.Equal(got[:3], []string{"held", "student-0", "presenter"}) ||
			!slices.Equal(slices.Sorted(slices.Values(got[3:])), []string{"student-1", "student-2", "student-3"}) {
			t.Fatalf("the writes ran in the order %v, want held, student-0, presenter, then the other students", got)
		}
	})
}

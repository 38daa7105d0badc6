package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"paytwice/store/postgres"
)

// listen starts db.Listen on channel and returns the payloads it hands
// over and a channel that receives once per (re)start of listening.
func listen(t *testing.T, db *postgres.DB, channel string) (<-chan string, <-chan struct{}) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	got, listening := make(chan string, 100), make(chan struct{}, 10)
	done := make(chan error, 1)
	go func() {
		done <- db.Listen(ctx, channel, func() { listening <- struct{}{} }, func(p string) { got <- p })
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != context.Canceled {
			t.Errorf("Listen returned %v, want context.Canceled", err)
		}
	})
	return got, listening
}

func receive[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s within 10 s", what)
		panic("unreachable")
	}
}

func TestNotifyReachesEveryServerInOrder(t *testing.T) {
	dbs := servers(t, 3, postgres.Options{})
	var got []<-chan string
	for _, db := range dbs {
		c, listening := listen(t, db, "room events")
		receive(t, listening, "start of listening")
		got = append(got, c)
	}
	for i := range 5 {
		if err := dbs[i%3].Notify(ctx, "room events", fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := dbs[0].Notify(ctx, "another channel", "not for them"); err != nil {
		t.Fatal(err)
	}
	for s, c := range got {
		for i := range 5 {
			if p := receive(t, c, "notification"); p != fmt.Sprint(i) {
				t.Fatalf("server %d got %q as notification %d", s, p, i)
			}
		}
	}
}

func TestNotifyRefusesAnOversizedPayload(t *testing.T) {
	db := open(t, nil)
	if err := db.Notify(ctx, "c", strings.Repeat("x", postgres.MaxNotifyPayload)); err != nil {
		t.Fatalf("largest payload: %v", err)
	}
	err := db.Notify(ctx, "c", strings.Repeat("x", postgres.MaxNotifyPayload+1))
	if err == nil || !strings.Contains(err.Error(), "over the limit") {
		t.Fatalf("oversized payload: %v", err)
	}
}

// A listener whose backend is terminated reconnects and says so, so that
// its owner can reload what it may have missed; notifications sent after
// that arrive again.
func TestListenReconnectsAfterItsConnectionIsKilled(t *testing.T) {
	db := open(t, nil)
	got, listening := listen(t, db, "room")
	receive(t, listening, "start of listening")
	var killed int
	if err := db.Pool().QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid() AND query LIKE 'LISTEN%'`).Scan(&killed); err != nil {
		t.Fatal(err)
	}
	if killed != 1 {
		t.Fatalf("terminated %d listening backends, want 1", killed)
	}
	receive(t, listening, "restart of listening")
	if err := db.Notify(ctx, "room", "after"); err != nil {
		t.Fatal(err)
	}
	if p := receive(t, got, "notification"); p != "after" {
		t.Fatalf("got %q", p)
	}
}

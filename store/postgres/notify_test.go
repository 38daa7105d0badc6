package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"paytwice/store/postgres"
	"paytwice/store/postgres/pgtest"
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
	// Several in one call: one transaction, delivered in order after the
	// others.
	if err := dbs[1].Notify(ctx, "room events", "5", "6", "7"); err != nil {
		t.Fatal(err)
	}
	for s, c := range got {
		for i := range 8 {
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
	// With an oversized payload among several, none is sent.
	c, listening := listen(t, db, "c")
	receive(t, listening, "start of listening")
	err = db.Notify(ctx, "c", "first", strings.Repeat("x", postgres.MaxNotifyPayload+1))
	if err == nil || !strings.Contains(err.Error(), "over the limit") {
		t.Fatalf("oversized payload among two: %v", err)
	}
	if err := db.Notify(ctx, "c", "after"); err != nil {
		t.Fatal(err)
	}
	if p := receive(t, c, "notification"); p != "after" {
		t.Fatalf("got %q first, want the notification sent after the refused ones", p)
	}
}

// A listener whose backend is terminated reconnects and says so, so that
// its owner can reload what it may have missed; notifications sent after
// that arrive again.
func TestListenReconnectsAfterItsConnectionIsKilled(t *testing.T) {
	var (
		mu   sync.Mutex
		logs []string
	)
	db, err := postgres.Open(ctx, pgtest.NewDatabase(t), postgres.Options{Logf: func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		logs = append(logs, fmt.Sprintf(format, args...))
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
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
	// The outage was reported once, and so was its end.
	mu.Lock()
	defer mu.Unlock()
	if len(logs) != 2 || !strings.HasPrefix(logs[0], "postgres: listening on room: ") || logs[1] != "postgres: listening on room again" {
		t.Fatalf("logged %q, want the lost connection and the return", logs)
	}
}

// ListenEach follows several channels over one connection and says which
// channel each notification came on, in the order they were sent.
func TestListenEachFollowsSeveralChannelsOnOneConnection(t *testing.T) {
	db := open(t, nil)
	listenCtx, cancel := context.WithCancel(ctx)
	type note struct{ channel, payload string }
	got, listening, done := make(chan note, 10), make(chan struct{}, 10), make(chan error, 1)
	go func() {
		done <- db.ListenEach(listenCtx, []string{"one", "two"}, func() { listening <- struct{}{} },
			func(channel, payload string) { got <- note{channel, payload} })
	}()
	defer func() {
		cancel()
		if err := <-done; err != context.Canceled {
			t.Errorf("ListenEach returned %v, want context.Canceled", err)
		}
	}()
	receive(t, listening, "start of listening")
	var listeners int
	if err := db.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND query LIKE 'LISTEN%'`).Scan(&listeners); err != nil {
		t.Fatal(err)
	}
	if listeners != 1 {
		t.Fatalf("%d listening connections, want one for both channels", listeners)
	}
	sent := []note{{"two", "a"}, {"three", "not followed"}, {"one", "b"}, {"two", "c"}}
	for _, n := range sent {
		if err := db.Notify(ctx, n.channel, n.payload); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []note{sent[0], sent[2], sent[3]} {
		if n := receive(t, got, "notification"); n != want {
			t.Fatalf("got %+v, want %+v", n, want)
		}
	}
}

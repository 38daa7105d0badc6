package postgres_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"paytwice/pay/peers"
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
	ownDatabase(t)
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
	ownDatabase(t)
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
	ownDatabase(t)
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
	ownDatabase(t)
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

// TestNotifyNumberedCommitsInNumberOrder: servers sending numbered
// batches at once, several each, give every listener every batch once,
// numbers without a hole and each batch's payloads in order, because a
// batch's number is taken in the transaction that commits it; and the
// batches read back are those the listeners received.
func TestNotifyNumberedCommitsInNumberOrder(t *testing.T) {
	dbs := servers(t, 3, postgres.Options{})
	var got []<-chan string
	for _, db := range dbs {
		c, listening := listen(t, db, "numbered")
		receive(t, listening, "start of listening")
		got = append(got, c)
	}
	const senders, batches = 3, 12
	var mu sync.Mutex
	sent := map[uint64][]string{}
	var wg sync.WaitGroup
	for s := range senders * len(dbs) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range batches {
				var payloads []string
				for p := range 1 + b%3 {
					payloads = append(payloads, fmt.Sprintf("sender %d batch %d part %d", s, b, p))
				}
				n, err := dbs[s%len(dbs)].NotifyNumbered(ctx, "numbered", payloads...)
				if err != nil {
					t.Errorf("sender %d: %v", s, err)
					return
				}
				mu.Lock()
				sent[n] = payloads
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	first, last := uint64(1<<63), uint64(0)
	for n := range sent {
		first, last = min(first, n), max(last, n)
	}
	if int(last-first+1) != len(sent) {
		t.Fatalf("numbers %d..%d for %d batches: a number was given twice or skipped", first, last, len(sent))
	}
	// One generation for every batch: the database did not crash.
	var gen int64
	if err := dbs[0].Pool().QueryRow(ctx, `SELECT gen FROM relay_life`).Scan(&gen); err != nil || gen <= 0 {
		t.Fatalf("the order's generation: %d, %v", gen, err)
	}
	var want []string
	for n := first; n <= last; n++ {
		for i, p := range sent[n] {
			want = append(want, peers.Part{N: n, I: uint64(i + 1), K: uint64(len(sent[n])), G: uint64(gen)}.Header()+p)
		}
	}
	for s, c := range got {
		for i, w := range want {
			if p := receive(t, c, "notification"); p != w {
				t.Fatalf("listener %d got %q as notification %d, want %q", s, p, i, w)
			}
		}
	}
	back, kept, err := dbs[2].ReadNumbered(ctx, first, last)
	if err != nil || !kept {
		t.Fatalf("ReadNumbered(%d, %d): kept %v, %v", first, last, kept, err)
	}
	if !slices.Equal(back, want) {
		t.Fatalf("read back %d payloads, not the %d received (first %q)", len(back), len(want), back[:min(1, len(back))])
	}
	if _, kept, err := dbs[0].ReadNumbered(ctx, last+1, last+5); err != nil || !kept {
		t.Errorf("batches not yet numbered: kept %v, %v; want kept (nothing was missed)", kept, err)
	}
}

// The relay_batches table keeps the newest peers.KeptBatches batches and
// no more: reading from the oldest kept one on is kept, reading from the
// one before it is not, although every later batch is returned.
func TestReadNumberedKeepsTheNewestBatchesAndSaysWhenOneIsForgotten(t *testing.T) {
	db := servers(t, 1, postgres.Options{MaxConns: 4})[0]
	const total = peers.KeptBatches + 3
	const senders = 4
	var wg sync.WaitGroup
	for s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := s; b < total; b += senders {
				if _, err := db.NotifyNumbered(ctx, "kept", fmt.Sprintf("batch %d of sender %d", b, s)); err != nil {
					t.Errorf("sender %d: %v", s, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	const last = total
	const oldest = last - peers.KeptBatches + 1 // 4
	var rows int
	if err := db.Pool().QueryRow(ctx, `SELECT count(*) FROM relay_batches`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != peers.KeptBatches {
		t.Errorf("%d batches kept after %d, want %d", rows, total, peers.KeptBatches)
	}
	numberOf := func(payload string) uint64 {
		t.Helper()
		part, _, ok := peers.CutPart(payload)
		if !ok {
			t.Fatalf("payload %q read back without its header", payload)
		}
		return part.N
	}

	back, kept, err := db.ReadNumbered(ctx, oldest, last)
	if err != nil || !kept {
		t.Fatalf("ReadNumbered(%d, %d), the oldest kept batch on: kept %v, %v; want kept", oldest, last, kept, err)
	}
	if len(back) != peers.KeptBatches || numberOf(back[0]) != oldest || numberOf(back[len(back)-1]) != last {
		t.Errorf("ReadNumbered(%d, %d) returned %d batches, want %d from %d to %d", oldest, last, len(back), peers.KeptBatches, oldest, last)
	}

	back, kept, err = db.ReadNumbered(ctx, oldest-1, last)
	if err != nil || kept {
		t.Fatalf("ReadNumbered(%d, %d), from the newest forgotten batch: kept %v, %v; want not kept", oldest-1, last, kept, err)
	}
	if len(back) != peers.KeptBatches || numberOf(back[0]) != oldest {
		t.Errorf("ReadNumbered(%d, %d) returned %d batches from #%d, want the %d kept from #%d", oldest-1, last, len(back), numberOf(back[0]), peers.KeptBatches, oldest)
	}

	if back, kept, err := db.ReadNumbered(ctx, 1, oldest-1); err != nil || kept || len(back) != 0 {
		t.Errorf("ReadNumbered(1, %d), forgotten batches only: %d batches, kept %v, %v; want none, not kept", oldest-1, len(back), kept, err)
	}
	if back, kept, err := db.ReadNumbered(ctx, last, last); err != nil || !kept || len(back) != 1 {
		t.Errorf("ReadNumbered(%d, %d), the newest: %d batches, kept %v, %v; want it, kept", last, last, len(back), kept, err)
	}
}

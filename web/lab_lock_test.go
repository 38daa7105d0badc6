package web

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"html"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"paytwice/views"
	"paytwice/web/live"
	"paytwice/web/room"
	"paytwice/web/room/lesson"
)

func TestKeyLocks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	noWait := func() { t.Error("waited for a free lock") }
	t.Run("a lock is one holder at a time, and its entry goes with its last user", func(t *testing.T) {
		k := newKeyLocks(10)
		unlock, err := k.lock(ctx, "s", "a", noWait)
		if err != nil {
			t.Fatal(err)
		}
		waiting := make(chan struct{})
		got := make(chan error, 1)
		go func() {
			u, err := k.lock(ctx, "s", "a", func() { close(waiting) })
			if err == nil {
				u()
			}
			got <- err
		}()
		<-waiting
		if n := k.len(); n != 1 {
			t.Fatalf("%d entries for one key", n)
		}
		unlock()
		unlock() // a second call does nothing
		if err := <-got; err != nil {
			t.Fatal(err)
		}
		if n := k.len(); n != 0 {
			t.Fatalf("%d entries left after every user left", n)
		}
	})
	t.Run("keys of other scopes or names never wait for each other", func(t *testing.T) {
		k := newKeyLocks(10)
		for _, name := range [][2]string{{"s", "a"}, {"s", "b"}, {"t", "a"}} {
			if _, err := k.lock(ctx, name[0], name[1], noWait); err != nil {
				t.Fatal(err)
			}
		}
		if n := k.len(); n != 3 {
			t.Fatalf("%d entries, want 3", n)
		}
	})
	t.Run("the map is bounded: a new key beyond it is refused, a held one still queues", func(t *testing.T) {
		k := newKeyLocks(2)
		for _, key := range []string{"a", "b"} {
			if _, err := k.lock(ctx, "s", key, noWait); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := k.lock(ctx, "s", "c", noWait); !errors.Is(err, errTooManyLocks) {
			t.Fatalf("a third key: %v", err)
		}
		gone, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := k.lock(gone, "s", "a", func() {}); !errors.Is(err, context.Canceled) {
			t.Fatalf("waiting on a held key: %v", err)
		}
	})
	t.Run("a waiter that gives up leaves no entry behind", func(t *testing.T) {
		k := newKeyLocks(10)
		unlock, _ := k.lock(ctx, "s", "a", noWait)
		gone, cancel := context.WithCancel(ctx)
		if _, err := k.lock(gone, "s", "a", cancel); !errors.Is(err, context.Canceled) {
			t.Fatalf("%v", err)
		}
		unlock()
		if n := k.len(); n != 0 {
			t.Fatalf("%d entries left", n)
		}
	})
}

// waitEvents reads sub until n events matching match have been seen.
func waitEvents(t *testing.T, sub *live.Subscription, n int, what string, match func(live.Event) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	seen := 0
	for seen < n {
		entries, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("%d of %d %s: %v", seen, n, what, err)
		}
		for _, e := range entries {
			if match(e.Event) {
				seen++
			}
		}
	}
}

func noteIs(prefix string) func(live.Event) bool {
	return func(e live.Event) bool { return e.Kind == labKind && strings.HasPrefix(e.Message, prefix) }
}

// holdGap makes the pause between the check and the insert wait until
// release is closed (or the request's context ends), and reports each
// request that reaches it on reached.
func holdGap(s *Server) (reached chan struct{}, release chan struct{}) {
	reached, release = make(chan struct{}, 64), make(chan struct{})
	s.payments.sleep = func(ctx context.Context, d time.Duration) error {
		reached <- struct{}{}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return reached, release
}

// TestLabMistakeMemoryLock: the check-then-insert race, behind a lock per
// key held in the server's memory. On one server a same-key storm is
// charged once: every request but the first waits, then replays. On three
// servers sharing one PostgreSQL database, a key's requests sent to
// different servers take a lock each and are all charged.
func TestLabMistakeMemoryLock(t *testing.T) {
	waitsOnRealClocks(t)
	body := `{"order_id":"A-5005","amount_satang":129900}`
	lockMode := room.LabSettings{Server: room.LabServer{Mode: room.LabMemoryLock, CheckGapMS: 1000}}

	t.Run("on one server a same-key storm waits in line and is charged once", func(t *testing.T) {
		const n = 10
		env := newTestEnv(t, Config{})
		env.putLab(lockMode)
		sub := env.Server.hub.Subscribe(env.Server.hub.LastSeq())
		_, release := holdGap(env.Server)
		key := uuid.NewString()
		answers := make(chan []response, 1)
		go func() { answers <- env.burst(n, key, body) }()
		// The first request holds the lock in its pause until every other
		// one is queued behind it: the storm really overlaps.
		waitEvents(t, sub, n-1, "requests waiting for the lock", noteIs(memoryLockWaiting))
		close(release)
		rs := <-answers

		loose, err := env.DB.LabLooseCharges(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		replays := 0
		for _, r := range rs {
			if r.Header.Get("Idempotent-Replayed") == "true" {
				replays++
			}
		}
		if len(loose) != 1 || countStatus(rs, http.StatusCreated) != n || replays != n-1 {
			t.Fatalf("answers %s, %d replayed; %d charges, want 1", statusList(rs), replays, len(loose))
		}
		if loose[0].Key != memoryLockPrefix+key {
			t.Errorf("the charge is filed under %q", loose[0].Key)
		}
		o := env.outcomes()
		if m := o.MemoryLock; m.Charges != 1 || m.ChargedTwice != 0 || m.LockWaits != n-1 || m.KeysLocked != 0 {
			t.Fatalf("the lab measured %+v", m)
		}
		if o.CheckThenInsert.Charges != 0 || o.CheckThenInsert.KeyRows != 0 {
			t.Fatalf("check-then-insert's card counts the lock's rows: %+v", o.CheckThenInsert)
		}
		if n := env.Server.lab.locks.mine.len(); n != 0 {
			t.Fatalf("%d keys still locked after the storm", n)
		}
	})

	t.Run("on three servers on one database each server's lock lets its request charge", func(t *testing.T) {
		const keys, servers = 4, 3
		envs, _ := classServers(t, "s1", "s2", "s3")
		// The chapter runs on the first server; the others follow its
		// reset through the relay, which puts their lab switches off.
		resets := make([]*live.Subscription, 0, servers-1)
		for _, e := range envs[1:] {
			resets = append(resets, e.Server.hub.Subscribe(e.Server.hub.LastSeq()))
		}
		ticks := envs[0].Server.hub.Subscribe(envs[0].Server.hub.LastSeq())
		if err := envs[0].Server.guidedLessons().start(context.Background(), "lock-in-memory", "test"); err != nil {
			t.Fatal(err)
		}
		for _, sub := range resets {
			waitEvents(t, sub, 1, "the chapter's reset", func(e live.Event) bool { return e.Kind == live.Reset })
		}
		// The pause of every request waits until all of them have looked
		// their key up: each key's requests, one per server, all find no
		// row, whatever order the machine runs them in.
		var mu sync.Mutex
		arrived, everyone := 0, make(chan struct{})
		gap := func(ctx context.Context, d time.Duration) error {
			mu.Lock()
			if arrived++; arrived == keys*servers {
				close(everyone)
			}
			mu.Unlock()
			select {
			case <-everyone:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		for _, e := range envs {
			e.Server.payments.sleep = gap
		}
		// The lab's settings are the room's: set through one server, every
		// server runs them.
		envs[0].putLab(lockMode)
		for _, e := range envs {
			waitUntil(t, "the lab's mode on "+e.Server.cfg.Name, func() bool { return e.Server.lab.Settings() == lockMode })
		}

		var wg sync.WaitGroup
		answers := make([][]response, keys)
		for k := range keys {
			answers[k] = make([]response, servers)
			key := fmt.Sprintf("lock-%d-%s", k, uuid.NewString())
			for i, e := range envs {
				wg.Go(func() {
					r, err := e.tryPay(key, fmt.Sprintf(`{"order_id":"L-%d","amount_satang":4200}`, k))
					if err != nil {
						r = response{Body: []byte(err.Error())}
					}
					answers[k][i] = r
				})
			}
		}
		wg.Wait()
		for k, rs := range answers {
			if countStatus(rs, http.StatusCreated) != servers {
				t.Fatalf("key %d: answers %s, want a 201 from every server", k, statusList(rs))
			}
			for _, r := range rs {
				if r.Header.Get("Idempotent-Replayed") != "" {
					t.Fatalf("key %d: a replay, though no server saw another's row", k)
				}
			}
		}
		for i, e := range envs {
			o := e.outcomes()
			if m := o.MemoryLock; m.Charges != keys*servers || m.ChargedTwice != keys || m.ExtraCharges != keys*(servers-1) || m.LockWaits != 0 {
				t.Fatalf("server %d measured %+v", i+1, m)
			}
			if o.ExtraCharges != keys*(servers-1) {
				t.Fatalf("server %d: %d extra charges in all", i+1, o.ExtraCharges)
			}
			if n := e.Server.lab.locks.mine.len(); n != 0 {
				t.Fatalf("server %d: %d keys still locked", i+1, n)
			}
		}
		// The other servers' charges reach the chapter's narration.
		waitTicks(t, envs[0], ticks, "lock-in-memory", []bool{false, true, true, false})
	})
}

// TestLabMemoryLockHangUps: a client that hangs up while it waits for the
// lock leaves the queue, and one that hangs up while it holds the lock
// (before anything was written) gives it back: the next request with the
// key runs, and is the only one charged.
func TestLabMemoryLockHangUps(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, Config{})
	env.putLab(room.LabSettings{Server: room.LabServer{Mode: room.LabMemoryLock, CheckGapMS: 1000}})
	sub := env.Server.hub.Subscribe(env.Server.hub.LastSeq())
	reached, release := holdGap(env.Server)
	key, body := uuid.NewString(), `{"order_id":"A-6006","amount_satang":129900}`

	// send pays in the background under ctx, and reports when it ends.
	send := func(ctx context.Context) <-chan error {
		done := make(chan error, 1)
		go func() {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, env.URL+paymentsPath, strings.NewReader(body))
			if err != nil {
				done <- err
				return
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", key)
			_, err = do(req)
			done <- err
		}()
		return done
	}

	holderCtx, hangUpHolder := context.WithCancel(context.Background())
	defer hangUpHolder()
	holder := send(holderCtx)
	<-reached // the first request holds the lock, in its pause

	waiterCtx, hangUpWaiter := context.WithCancel(context.Background())
	defer hangUpWaiter()
	waiter := send(waiterCtx)
	waitEvents(t, sub, 1, "a request waiting for the lock", noteIs(memoryLockWaiting))
	hangUpWaiter()
	if err := <-waiter; !errors.Is(err, context.Canceled) {
		t.Fatalf("the waiter's client: %v", err)
	}
	waitEvents(t, sub, 1, "the waiter leaving the queue", noteIs("the client hung up while waiting"))
	if n := env.Server.lab.locks.mine.len(); n != 1 {
		t.Fatalf("%d keys locked, want the holder's only", n)
	}

	hangUpHolder()
	if err := <-holder; !errors.Is(err, context.Canceled) {
		t.Fatalf("the holder's client: %v", err)
	}
	waitEvents(t, sub, 1, "the holder giving the lock back", noteIs("the client hung up before the key was inserted"))
	close(release) // the next request's pause does not wait
	r := env.pay(key, body)
	if r.Status != http.StatusCreated || r.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("the request after the hang-ups: %d, replayed %q: %s", r.Status, r.Header.Get("Idempotent-Replayed"), r.Body)
	}
	if loose, _ := env.DB.LabLooseCharges(context.Background()); len(loose) != 1 {
		t.Fatalf("%d charges, want 1", len(loose))
	}
	if n := env.Server.lab.locks.mine.len(); n != 0 {
		t.Fatalf("%d keys still locked", n)
	}
}

// TestLessonLockInMemory: the chapter comes right after check-then-insert,
// renders for the presenter and for a student, sets the lock and its
// pause when started, and ticks its first item when a request that waited
// for the lock replays.
func TestLessonLockInMemory(t *testing.T) {
	t.Parallel()
	const slug = "lock-in-memory"
	ctx := context.Background()
	env := newTestEnv(t, Config{})
	i, ch, ok := env.Server.teaching.lessons.Find(slug)
	if !ok || env.Server.teaching.lessons[i-1].Slug != "check-then-insert" {
		t.Fatalf("chapter %q at %d, not after check-then-insert", slug, i+1)
	}

	t.Run("it renders its steps, the presenter's and a student's", func(t *testing.T) {
		for _, presenter := range []bool{true, false} {
			var buf bytes.Buffer
			if err := views.LessonPanel(env.Server.guidedLessons().view(slug, presenter, false)).Render(ctx, &buf); err != nil {
				t.Fatal(err)
			}
			page := buf.String()
			want := append([]string{ch.Title, fmt.Sprintf("Chapter %d of %d", i+1, len(env.Server.teaching.lessons)), ch.Why}, ch.WatchTexts()...)
			if presenter {
				want = append(want, ch.Do...)
			} else {
				want = append(want, ch.StudentDo...)
			}
			for _, w := range want {
				if !strings.Contains(page, html.EscapeString(w)) {
					t.Errorf("presenter %v: the chapter lacks %q", presenter, w)
				}
			}
			if strings.Contains(page, "paytwice cluster -servers 3") != presenter {
				t.Errorf("presenter %v: the cluster command shown %v", presenter, !presenter)
			}
		}
		if r := env.get("/?lesson="+slug, "Accept", "text/html"); r.Status != http.StatusOK || !strings.Contains(string(r.Body), ch.Title) {
			t.Fatalf("the linked chapter: %d", r.Status)
		}
	})

	t.Run("started, a double-click on one server waits, replays and ticks its item", func(t *testing.T) {
		sub := env.Server.hub.Subscribe(env.Server.hub.LastSeq())
		ticks := env.Server.hub.Subscribe(env.Server.hub.LastSeq())
		if err := env.Server.guidedLessons().start(ctx, slug, "test"); err != nil {
			t.Fatal(err)
		}
		if got := env.Server.lab.Settings(); got.Server.Mode != room.LabMemoryLock || got.Server.CheckGapMS != lesson.LockGapMS {
			t.Fatalf("the chapter set %+v", got)
		}
		_, release := holdGap(env.Server)
		answers := make(chan []response, 1)
		go func() { answers <- env.burst(2, uuid.NewString(), `{"order_id":"A-7007","amount_satang":129900}`) }()
		waitEvents(t, sub, 1, "the second click waiting for the lock", noteIs(memoryLockWaiting))
		close(release)
		if rs := <-answers; countStatus(rs, http.StatusCreated) != 2 {
			t.Fatalf("answers %s", statusList(rs))
		}
		waitTicks(t, env, ticks, slug, []bool{true, false, false, false})
	})
}

// TestLabMemoryLockMapFull: while the lock map holds as many keys as it
// may, a request with another key is refused with a 503 that says to
// retry, and nothing of it is written; the key being worked on is not
// disturbed.
func TestLabMemoryLockMapFull(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, Config{})
	env.putLab(room.LabSettings{Server: room.LabServer{Mode: room.LabMemoryLock, CheckGapMS: 1000}})
	env.Server.lab.locks.mine = newKeyLocks(1)
	reached, release := holdGap(env.Server)
	first := make(chan response, 1)
	go func() {
		r, err := env.tryPay("full-1", `{"order_id":"F-1","amount_satang":100}`)
		if err != nil {
			r.Body = []byte(err.Error())
		}
		first <- r
	}()
	<-reached // full-1 holds the only lock there is room for

	r := env.pay("full-2", `{"order_id":"F-2","amount_satang":100}`)
	if r.Status != http.StatusServiceUnavailable || !strings.Contains(string(r.Body), "Retry with the same key") {
		t.Fatalf("a key beyond the map: %d %s", r.Status, r.Body)
	}
	close(release)
	if r := <-first; r.Status != http.StatusCreated {
		t.Fatalf("the key being worked on: %d %s", r.Status, r.Body)
	}
	if loose, _ := env.DB.LabLooseCharges(context.Background()); len(loose) != 1 || loose[0].OrderID != "F-1" {
		t.Fatalf("charges %+v, want F-1's only", loose)
	}
	if r := env.pay("full-2", `{"order_id":"F-2","amount_satang":100}`); r.Status != http.StatusCreated {
		t.Fatalf("full-2 retried once there is room: %d", r.Status)
	}
}

// TestLessonLockInMemoryOnSQLite: chapter 8 on the embedded default, a
// server with its SQLite database to itself. One server: a double-click
// waits for the lock and is charged once. "Two servers": two servers
// inside the process, each with a lock table of its own, take the
// requests in turn, so the same double-click takes two locks, finds no
// row twice and is charged twice; the look-up by order counts both
// charges, though they are in the lab's unguarded table, and the timeline
// names the two servers. Then the database decides: one charge.
func TestLessonLockInMemoryOnSQLite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := newTestEnv(t, Config{})
	if err := env.Server.guidedLessons().start(ctx, "lock-in-memory", "test"); err != nil {
		t.Fatal(err)
	}
	reached, release := holdGap(env.Server)
	lookUp := func(order string) []any {
		t.Helper()
		r := env.get("/v1/payments?order_id=" + order)
		if r.Status != http.StatusOK {
			t.Fatalf("look-up: %d %s", r.Status, r.Body)
		}
		return r.JSON(t)["charges"].([]any)
	}
	doubleClick := func(order string) []response {
		t.Helper()
		answers := make(chan []response, 1)
		go func() {
			answers <- env.burst(2, uuid.NewString(), fmt.Sprintf(`{"order_id":%q,"amount_satang":129900}`, order))
		}()
		return <-answers
	}

	// One server: the second click waits for the first's lock, then
	// finds its row (it never reaches the pause).
	waited := make(chan struct{})
	go func() {
		defer close(waited)
		<-reached
		for range 200 {
			if env.Server.lab.locks.waits.Load() == 1 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		release <- struct{}{}
	}()
	if rs := doubleClick("A-8001"); countStatus(rs, http.StatusCreated) != 2 {
		t.Fatalf("one server: answers %s", statusList(rs))
	}
	<-waited
	if n := env.Server.lab.locks.waits.Load(); n != 1 {
		t.Fatalf("one server: %d requests waited for the lock, want the second click", n)
	}
	if ch := lookUp("A-8001"); len(ch) != 1 {
		t.Fatalf("one server: the look-up counts %d charges, want 1", len(ch))
	}

	// Two servers inside the process, behind the same address.
	if r := env.send(http.MethodPatch, "/api/lab", map[string]any{"server": map[string]any{"servers": 2}}); r.Status != http.StatusOK {
		t.Fatalf("two servers: %d %s", r.Status, r.Body)
	}
	go func() {
		// Both clicks reach the pause after the look-up: neither waited.
		<-reached
		<-reached
		release <- struct{}{}
		release <- struct{}{}
	}()
	if rs := doubleClick("A-8002"); countStatus(rs, http.StatusCreated) != 2 {
		t.Fatalf("two servers: answers %s", statusList(rs))
	}
	ch := lookUp("A-8002")
	if len(ch) != 2 {
		t.Fatalf("two servers: the look-up counts %d charges, want the 2 the order has", len(ch))
	}
	for _, c := range ch {
		if c.(map[string]any)["guarded"] != false {
			t.Errorf("a charge of the lock in memory reads as guarded: %v", c)
		}
	}
	servers := map[string]bool{}
	for _, e := range env.Server.hub.Recent(200) {
		if e.OrderID == "A-8002" && e.Kind == live.Charged {
			servers[e.Server] = true
		}
	}
	if !servers[inProcessServerA] || !servers[inProcessServerB] || len(servers) != 2 {
		t.Errorf("the charges were made by %v, want one by each server inside the process", servers)
	}
	if o := env.outcomes().MemoryLock; o.ChargedTwice != 1 {
		t.Errorf("the lab's eighth card counts %d keys charged twice, want 1", o.ChargedTwice)
	}
	if page := env.get("/lab/live?s=0", "Accept", "application/json"); !strings.Contains(string(page.Body), "two servers inside this process") {
		t.Errorf("the lab does not say it runs two servers inside this process: %.300s", page.Body)
	}

	// The database decides.
	if r := env.send(http.MethodPatch, "/api/lab", map[string]any{"server": map[string]any{"mode": room.LabCorrect}}); r.Status != http.StatusOK {
		t.Fatalf("the database decides: %d %s", r.Status, r.Body)
	}
	if rs := doubleClick("A-8003"); countStatus(rs, http.StatusCreated) < 1 {
		t.Fatalf("the database decides: answers %s", statusList(rs))
	}
	if ch := lookUp("A-8003"); len(ch) != 1 {
		t.Fatalf("the database decides: %d charges, want 1", len(ch))
	}
}

// TestLabLoosePauseTakesNothingFromTheWork: chapter 8's pause between
// the check and the insert (1 s) is as long as the gateway time-out of a
// server with a 2 s lock timeout, and its payment is still charged and
// answered 201: the work's time-out counts from the insert, not from
// before the pause (the walk of the chapters saw 500s and 504s there).
func TestLabLoosePauseTakesNothingFromTheWork(t *testing.T) {
	env := newTestEnv(t, Config{LockTimeout: 2 * time.Second})
	if err := env.Server.guidedLessons().start(context.Background(), "lock-in-memory", "test"); err != nil {
		t.Fatal(err)
	}
	if gap, timeout := env.Server.lab.Settings().Server.CheckGapMS, env.Server.cfg.GatewayTimeout; time.Duration(gap)*time.Millisecond < timeout {
		t.Fatalf("the pause (%d ms) is shorter than the gateway time-out (%s): the test shows nothing", gap, timeout)
	}
	r := env.pay("pause-1", `{"order_id":"P-1","amount_satang":100}`)
	if r.Status != http.StatusCreated {
		t.Fatalf("the payment after a pause as long as the time-out: %d %s, want 201", r.Status, r.Body)
	}
	if chs, err := env.DB.LabLooseCharges(context.Background()); err != nil || len(chs) != 1 {
		t.Fatalf("%d unguarded charges (%v), want 1", len(chs), err)
	}
}

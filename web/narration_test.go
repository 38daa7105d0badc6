package web

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"paytwice/web/live"
	"paytwice/web/room"
	"paytwice/web/room/lesson"
)

// waitTicks waits, on the event stream, until the chapter's items are
// ticked as want says.
func waitTicks(t *testing.T, env *testEnv, sub *live.Subscription, slug string, want []bool) []lesson.Tick {
	t.Helper()
	// Bounded only to keep a broken test from hanging: on a loaded
	// machine the narration may read the events seconds late.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	match := func() ([]lesson.Tick, bool) {
		got := env.Server.teaching.narration.Ticked(slug)
		if len(got) != len(want) {
			return got, false
		}
		for i := range want {
			if got[i].Seen != want[i] {
				return got, false
			}
		}
		return got, true
	}
	for {
		if got, ok := match(); ok {
			return got
		}
		if _, err := sub.Next(ctx); err != nil {
			got, _ := match()
			t.Fatalf("ticks %+v, want %v: %v", got, want, err)
		}
	}
}

func TestNarrationTicksWhatTheServerSees(t *testing.T) {
	waitsOnRealClocks(t)
	body := `{"order_id":"A-4242","amount_satang":129900}`
	t.Run("no key: the second charge of one order ticks both items and names its row", func(t *testing.T) {
		env := newTestEnv(t, Config{})
		sub := env.Server.hub.Subscribe(env.Server.hub.LastSeq())
		if err := env.Server.guidedLessons().start(context.Background(), "no-key", "test"); err != nil {
			t.Fatal(err)
		}
		env.pay(uuid.NewString(), body)
		if got := env.Server.teaching.narration.Ticked("no-key"); got[0].Seen || got[1].Seen {
			t.Fatalf("ticked after one charge: %+v", got)
		}
		env.pay(uuid.NewString(), body)
		got := waitTicks(t, env, sub, "no-key", []bool{true, true, false})
		if !strings.HasPrefix(got[0].Row, "tl-rq_") {
			t.Errorf("the item names row %q", got[0].Row)
		}
		page := string(env.get("/board", "Accept", "text/html").Body)
		if strings.Count(page, `class="watch-item seen"`) != 2 || !strings.Contains(page, `data-row="`+got[0].Row+`"`) {
			t.Error("the board does not show the ticks and their row")
		}
		if !strings.Contains(string(env.get("/", "Accept", "text/html").Body), `<span class="badge ok">seen</span>`) {
			t.Error("the checkout's lesson does not show the ticks")
		}
		// The fix holding: with the key back, a second request with the
		// key is answered from the first, not charged.
		env.putLab(room.DefaultLabSettings())
		key := uuid.NewString()
		env.pay(key, body)
		env.pay(key, body)
		waitTicks(t, env, sub, "no-key", []bool{true, true, true})
	})
	t.Run("response lost: the lost 201, then its replay and one charge", func(t *testing.T) {
		env := newTestEnv(t, Config{})
		sub := env.Server.hub.Subscribe(env.Server.hub.LastSeq())
		if err := env.Server.guidedLessons().start(context.Background(), "response-lost", "test"); err != nil {
			t.Fatal(err)
		}
		if _, err := env.tryPay("lost-1", body); err == nil {
			t.Fatal("the response arrived")
		}
		waitTicks(t, env, sub, "response-lost", []bool{true, false, false})
		if r := env.pay("lost-1", body); r.Status != http.StatusCreated {
			t.Fatalf("retry: %d", r.Status)
		}
		waitTicks(t, env, sub, "response-lost", []bool{true, true, true})
	})
	t.Run("a new chapter starts with nothing ticked", func(t *testing.T) {
		env := newTestEnv(t, Config{})
		if err := env.Server.guidedLessons().start(context.Background(), "no-key", "test"); err != nil {
			t.Fatal(err)
		}
		env.pay(uuid.NewString(), body)
		env.pay(uuid.NewString(), body)
		sub := env.Server.hub.Subscribe(0)
		waitTicks(t, env, sub, "no-key", []bool{true, true, false})
		if err := env.Server.guidedLessons().start(context.Background(), "new-key-per-retry", "test"); err != nil {
			t.Fatal(err)
		}
		if got := env.Server.teaching.narration.Ticked("new-key-per-retry"); len(got) != 3 || got[0].Seen || got[1].Seen {
			t.Fatalf("%+v", got)
		}
	})
}

// TestNarrationCrashMidway walks the crash chapter: the crash leaves the
// key started and the retry gets 409, the sweeper finds the gateway's
// charge and records it, and the last retry is its replay.
func TestNarrationCrashMidway(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, Config{LockTimeout: 2 * time.Second})
	sub := env.Server.hub.Subscribe(env.Server.hub.LastSeq())
	if err := env.Server.guidedLessons().start(context.Background(), "crash-midway", "test"); err != nil {
		t.Fatal(err)
	}
	body := `{"order_id":"C-1","amount_satang":129900}`
	if _, err := env.tryPay("crash-1", body); err == nil {
		t.Fatal("the crashed request answered")
	}
	if r := env.pay("crash-1", body); r.Status != http.StatusConflict {
		t.Fatalf("the retry while the key is started: %d", r.Status)
	}
	waitTicks(t, env, sub, "crash-midway", []bool{true, false, false})
	env.Clock.Advance(3 * time.Second)
	if out, err := env.Server.Jobs().Sweep(context.Background()); err != nil || len(out) != 1 {
		t.Fatalf("sweep: %v %v", out, err)
	}
	if r := env.pay("crash-1", body); r.Status != http.StatusCreated || r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the retry after the sweep: %d replayed %q", r.Status, r.Header.Get("Idempotent-Replayed"))
	}
	waitTicks(t, env, sub, "crash-midway", []bool{true, true, true})
	if n := env.charges(); n != 1 {
		t.Fatalf("%d charges, want 1", n)
	}
}

// TestWatchTicksAreTheRoomsOnEveryServer: two charges of one order on
// server A tick two of the chapter's items; server B, which joins the
// class afterwards and saw none of it, shows the same two ticks by the
// same row, on PostgreSQL as on one SQLite file.
func TestWatchTicksAreTheRoomsOnEveryServer(t *testing.T) {
	waitsOnRealClocks(t)
	class := newClass(t)
	a := class.server(Config{Name: "A"}, nil)
	a.must(http.MethodPut, "/api/lessons/current", `{"slug":"no-key"}`)
	sub := a.Server.hub.Subscribe(a.Server.hub.LastSeq())
	body := `{"order_id":"A-77","amount_satang":500}`
	a.pay(uuid.NewString(), body)
	a.pay(uuid.NewString(), body)
	want := waitTicks(t, a, sub, "no-key", []bool{true, true, false})
	// B reads them in the room, where A's narration wrote them, or
	// receives them when A does.
	b := class.server(Config{Name: "B"}, nil)
	got := waitTicks(t, b, b.Server.hub.Subscribe(0), "no-key", []bool{true, true, false})
	if got[0].Row != want[0].Row {
		t.Fatalf("B's first tick names row %q, A's %q", got[0].Row, want[0].Row)
	}
	page := string(b.get("/board", "Accept", "text/html").Body)
	if strings.Count(page, `class="watch-item seen"`) != 2 || !strings.Contains(page, `data-row="`+want[0].Row+`"`) {
		t.Error("B's board does not show A's ticks and their row")
	}
	if a.Server.teaching.narration.Version() != b.Server.teaching.narration.Version() {
		t.Error("the lesson panel's version differs between the servers: a page moving between them redraws for nothing")
	}
}

package lesson

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"paytwice/web/live"
	"paytwice/web/room"
)

// narrating is a narrator of the lessons on a room of its own, on
// memory peers: what a server on its own runs.
func narrating(t *testing.T) (*Narrator, *room.Room[room.State]) {
	t.Helper()
	r := room.New(room.Memory(), "test-id", "", room.Defaults, func(_, _ room.State) {}, t.Logf)
	ctx, cancel := context.WithCancel(context.Background())
	r.Start(ctx)
	t.Cleanup(func() { cancel(); r.Wait() })
	hub := live.New(live.DefaultSize, time.Now)
	t.Cleanup(hub.Close)
	return NewNarrator(Build(30*time.Second), r, hub), r
}

// startLesson makes slug the room's chapter, as a presenter does.
func startLesson(t *testing.T, r *room.Room[room.State], slug string) {
	t.Helper()
	if _, _, err := r.Change(context.Background(), func(s *room.State) error {
		s.SetLesson(slug)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func seen(ticks []Tick) []bool {
	out := make([]bool, len(ticks))
	for i, t := range ticks {
		out[i] = t.Seen
	}
	return out
}

func TestNarratorTicksTheRoomsChapter(t *testing.T) {
	n, r := narrating(t)
	charge := func(key, request string) {
		n.see(live.Event{Kind: live.Received, Scope: "s", Key: key, OrderID: "A-1", Request: request})
		n.see(live.Event{Kind: live.Charged, Scope: "s", Key: key, OrderID: "A-1", Request: request})
	}

	t.Run("with no lesson, nothing ticks", func(t *testing.T) {
		charge("k1", "rq_1")
		charge("k2", "rq_2")
		if got := n.Ticked(""); len(got) != 0 {
			t.Fatalf("ticks without a lesson: %+v", got)
		}
	})

	t.Run("the second charge of one order ticks the no-key chapter's first two items, naming its row", func(t *testing.T) {
		startLesson(t, r, "no-key")
		v := n.Version()
		charge("k3", "rq_3")
		if got := seen(n.Ticked("no-key")); fmt.Sprint(got) != "[false false false]" {
			t.Fatalf("one charge ticked %v", got)
		}
		charge("k4", "rq_4")
		got := n.Ticked("no-key")
		if fmt.Sprint(seen(got)) != "[true true false]" || got[0].Row != "tl-rq_4" {
			t.Fatalf("two charges of one order: %+v", got)
		}
		if n.Version() == v {
			t.Fatal("the lesson panel's version did not move when items ticked")
		}
		if n.Ticked("new-key-per-retry") != nil {
			t.Fatal("a chapter the room does not run has ticks")
		}
	})

	t.Run("the same chapter started again starts with nothing ticked", func(t *testing.T) {
		v := n.Version()
		startLesson(t, r, "no-key")
		if got := seen(n.Ticked("no-key")); fmt.Sprint(got) != "[false false false]" {
			t.Fatalf("restarted chapter: %v", got)
		}
		if n.Version() == v {
			t.Fatal("the lesson panel's version did not move at the lesson's start")
		}
		// The orders of the run before are forgotten: one charge is one.
		charge("k5", "rq_5")
		if got := seen(n.Ticked("no-key")); got[0] {
			t.Fatalf("a charge counted the last run's: %v", got)
		}
	})

	t.Run("a replay of a lost 201 ticks the response-lost chapter", func(t *testing.T) {
		startLesson(t, r, "response-lost")
		n.see(live.Event{Kind: live.ResponseLost, Scope: "s", Key: "k6", OrderID: "A-6"})
		n.see(live.Event{Kind: live.Charged, Scope: "s", Key: "k6", OrderID: "A-6"})
		n.see(live.Event{Kind: live.Replayed, Scope: "s", Key: "k6", OrderID: "A-6", Status: http.StatusCreated})
		if got := seen(n.Ticked("response-lost")); fmt.Sprint(got) != "[true true true]" {
			t.Fatalf("response-lost: %v", got)
		}
	})
}

// A lesson that runs for hours remembers at most narrationLimit keys and
// orders: the oldest are forgotten.
func TestNarrationMemoryIsBounded(t *testing.T) {
	n, r := narrating(t)
	startLesson(t, r, "no-key")
	for i := range narrationLimit + 500 {
		k := fmt.Sprint("k-", i)
		n.see(live.Event{Kind: live.Received, Scope: "s", Key: k, OrderID: "O-" + k})
		n.see(live.Event{Kind: live.Charged, Scope: "s", Key: k, OrderID: "O-" + k})
	}
	st := n.st
	if len(st.keyEvents) > narrationLimit || len(st.keyCharges) > narrationLimit || len(st.orderCharges) > narrationLimit || len(st.orderKeys) > narrationLimit {
		t.Fatalf("remembered %d keys, %d key charges, %d orders, %d order keys; limit %d",
			len(st.keyEvents), len(st.keyCharges), len(st.orderCharges), len(st.orderKeys), narrationLimit)
	}
	// The newest are still there, and count.
	last := "s\x00k-" + fmt.Sprint(narrationLimit+499)
	if st.keyCharges[last] != 1 || st.keyEvents[last][live.Charged] != 1 {
		t.Fatalf("the newest key: %d charges, events %v", st.keyCharges[last], st.keyEvents[last])
	}
}

// Every chapter is complete: a slug, a title, things to do and to watch
// for, and a reason; slugs are unique, and Find and Unknown agree.
func TestBookChapters(t *testing.T) {
	b := Build(30 * time.Second)
	slugs := map[string]bool{}
	for i, c := range b {
		if c.Slug == "" || c.Title == "" || len(c.Do) == 0 || len(c.Watch) == 0 || c.Why == "" || slugs[c.Slug] {
			t.Errorf("chapter %d %q is incomplete or repeated", i+1, c.Slug)
		}
		slugs[c.Slug] = true
		if j, _, ok := b.Find(c.Slug); !ok || j != i {
			t.Errorf("Find(%q) = %d, %v", c.Slug, j, ok)
		}
		if len(c.WatchTexts()) != len(c.Watch) {
			t.Errorf("%s: %d texts for %d items", c.Slug, len(c.WatchTexts()), len(c.Watch))
		}
	}
	if _, _, ok := b.Find("no-such-chapter"); ok {
		t.Fatal("found a chapter that is not there")
	}
	if err := b.Unknown("no-such-chapter"); err == nil {
		t.Fatal("no error for an unknown chapter")
	}
}

// Two servers on one room give the lesson panel the same version when
// they show the same panel, whatever each ticked in the runs before, and
// different versions when they show different ones: a page the front
// door sends to the other server asks again only when the panel differs.
func TestNarrationVersionIsThePanelsNotTheServers(t *testing.T) {
	a, r := narrating(t)
	hub := live.New(live.DefaultSize, time.Now)
	t.Cleanup(hub.Close)
	b := NewNarrator(Build(30*time.Second), r, hub)
	charge := func(n *Narrator, key, request string) {
		n.see(live.Event{Kind: live.Received, Scope: "s", Key: key, OrderID: "A-1", Request: request})
		n.see(live.Event{Kind: live.Charged, Scope: "s", Key: key, OrderID: "A-1", Request: request})
	}

	startLesson(t, r, "no-key")
	charge(a, "k1", "rq_1")
	charge(a, "k2", "rq_2") // only a saw the charges: two items tick there
	if a.Version() == b.Version() {
		t.Fatalf("a panel with two items ticked and one with none share the version %d", a.Version())
	}
	if v := a.Version(); v == 0 || v >= 1<<53 {
		t.Fatalf("version %d", v)
	}

	startLesson(t, r, "no-key") // the chapter again: nothing ticked on either
	if va, vb := a.Version(), b.Version(); va != vb {
		t.Fatalf("the same panel has the version %d on one server and %d on the other", va, vb)
	}
	startLesson(t, r, "")
	if va, vb := a.Version(), b.Version(); va != vb {
		t.Fatalf("no lesson: versions %d and %d", va, vb)
	}
}

// TestCheckThenInsertSecondItemWaitsForTheConstraints: in the check-then-
// insert chapter a key charged once and then replayed (a double-click
// whose requests did not overlap) does not tick "Second burst" while the
// tables still have no constraints; the same after "Put the constraints
// back" does.
func TestCheckThenInsertSecondItemWaitsForTheConstraints(t *testing.T) {
	n, r := narrating(t)
	if _, _, err := r.Change(context.Background(), func(s *room.State) error {
		s.Lab.Server.Mode = room.LabCheckThenInsert
		s.SetLesson("check-then-insert")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	oncePlusReplay := func(key string) {
		n.see(live.Event{Kind: live.Received, Scope: "s", Key: key, OrderID: "O-" + key, Request: "rq_1" + key})
		n.see(live.Event{Kind: live.Charged, Scope: "s", Key: key, OrderID: "O-" + key, Request: "rq_1" + key})
		n.see(live.Event{Kind: live.Received, Scope: "s", Key: key, OrderID: "O-" + key, Request: "rq_2" + key})
		n.see(live.Event{Kind: live.Replayed, Scope: "s", Key: key, OrderID: "O-" + key, Request: "rq_2" + key, Status: http.StatusCreated})
	}
	// The first burst: two charges for one key.
	n.see(live.Event{Kind: live.Charged, Scope: "s", Key: "k1", OrderID: "O-1", Request: "rq_a"})
	n.see(live.Event{Kind: live.Charged, Scope: "s", Key: "k1", OrderID: "O-1", Request: "rq_b"})
	oncePlusReplay("k2")
	if got := seen(n.Ticked("check-then-insert")); fmt.Sprint(got) != "[true false]" {
		t.Fatalf("without the constraints: %v, want only the first burst ticked", got)
	}
	if _, _, err := r.Change(context.Background(), func(s *room.State) error {
		s.Lab.Server.Mode = room.LabCheckThenInsertConstrained
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	oncePlusReplay("k3")
	if got := seen(n.Ticked("check-then-insert")); fmt.Sprint(got) != "[true true]" {
		t.Fatalf("with the constraints back: %v, want both ticked", got)
	}
}

// TestRetryEvery4xxThirdItemWaitsForTheFix: in the retry-every-4xx
// chapter, a second phone's first 422 (its key's only one so far) does
// not tick "4xx not retried" while the browsers still retry every 4xx;
// a 422 after "Retry only what can change" does.
func TestRetryEvery4xxThirdItemWaitsForTheFix(t *testing.T) {
	n, r := narrating(t)
	change := func(retry bool) {
		t.Helper()
		if _, _, err := r.Change(context.Background(), func(s *room.State) error {
			s.Lab.Client.RetryEvery4xx = retry
			if retry {
				s.SetLesson("retry-every-4xx")
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	change(true)
	mismatch := func(key string) {
		n.see(live.Event{Kind: live.Mismatch, Scope: "s", Key: key, OrderID: "O-" + key, Status: http.StatusUnprocessableEntity})
	}
	mismatch("phone-1")
	mismatch("phone-1")
	mismatch("phone-2")
	if got := seen(n.Ticked("retry-every-4xx")); fmt.Sprint(got) != "[true true false]" {
		t.Fatalf("while every 4xx is retried: %v", got)
	}
	change(false)
	mismatch("phone-3")
	if got := seen(n.Ticked("retry-every-4xx")); fmt.Sprint(got) != "[true true true]" {
		t.Fatalf("after the fix: %v", got)
	}
}

// TestPruneTooSoonThirdItemWaitsForTheLongerRetention: in the
// prune-too-soon chapter, a replay while keys are still kept 1 minute (a
// phone paying again before the next prune) does not tick "With keys kept
// 24 hours …"; a replay after "Keep keys 24 hours" does.
func TestPruneTooSoonThirdItemWaitsForTheLongerRetention(t *testing.T) {
	n, r := narrating(t)
	setRetention := func(seconds int64, lesson bool) {
		t.Helper()
		if _, _, err := r.Change(context.Background(), func(s *room.State) error {
			s.Lab.Server.Mode, s.Lab.Server.RetentionSeconds = room.LabKeyTableOnly, seconds
			if lesson {
				s.SetLesson("prune-too-soon")
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	setRetention(room.LabShortRetentionSeconds, true)
	n.see(live.Event{Kind: live.Pruned})
	n.see(live.Event{Kind: live.Charged, Scope: "s", Key: "k1", OrderID: "O-1"})
	n.see(live.Event{Kind: live.Charged, Scope: "s", Key: "k1", OrderID: "O-1"})
	replay := func(key string) {
		n.see(live.Event{Kind: live.Replayed, Scope: "s", Key: key, OrderID: "O-" + key, Status: http.StatusCreated})
	}
	replay("k2")
	if got := seen(n.Ticked("prune-too-soon")); fmt.Sprint(got) != "[true true false]" {
		t.Fatalf("with keys kept 1 minute: %v", got)
	}
	setRetention(room.LabLongRetentionSeconds, false)
	replay("k3")
	if got := seen(n.Ticked("prune-too-soon")); fmt.Sprint(got) != "[true true true]" {
		t.Fatalf("with keys kept 24 hours: %v", got)
	}
}

package storetest

import (
	"testing"

	"paytwice/pay"
)

// answerCounts: each origin's counts are kept apart and replaced by its
// next write; a write for a later reset forgets the earlier resets' rows,
// and a read sees only the reset it asks for.
func answerCounts(t *testing.T, open Open) {
	db := open(t, newClock().Now)
	save := func(origin string, gen uint64, c pay.AnswerCounts) {
		t.Helper()
		if err := db.SaveAnswerCounts(ctx, origin, gen, c); err != nil {
			t.Fatal(err)
		}
	}
	read := func(gen uint64) map[string]pay.AnswerCounts {
		t.Helper()
		got, err := db.AnswerCounts(ctx, gen)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := read(0); len(got) != 0 {
		t.Fatalf("a new store keeps counts: %v", got)
	}
	a1 := pay.AnswerCounts{Requests: 5, Rejected: 1, Lost: 1, Replays: 2, Conflicts: 3, Mismatches: 4}
	a2 := pay.AnswerCounts{Requests: 9, Rejected: 1, Lost: 1, Replays: 4, Conflicts: 3, Mismatches: 4}
	b := pay.AnswerCounts{Requests: 1 << 40, Replays: 7}
	save("a", 3, a1)
	save("b", 3, b)
	save("a", 3, a2)
	if got := read(3); len(got) != 2 || got["a"] != a2 || got["b"] != b {
		t.Fatalf("kept for reset 3: %v, want a %v and b %v", got, a2, b)
	}
	if got := read(2); len(got) != 0 {
		t.Fatalf("kept for reset 2: %v, want none", got)
	}
	// A server that has not heard of a reset yet writes for the earlier
	// one: its row is not read as the later reset's.
	c := pay.AnswerCounts{Requests: 1}
	save("c", 4, c)
	save("a", 3, a1)
	if got := read(4); len(got) != 1 || got["c"] != c {
		t.Fatalf("kept for reset 4: %v, want c %v alone", got, c)
	}
	save("c", 4, c)
	if got := read(3); len(got) != 0 {
		t.Fatalf("a write for reset 4 left reset 3's rows: %v", got)
	}
}

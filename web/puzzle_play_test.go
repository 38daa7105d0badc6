package web

import (
	"context"
	"testing"

	"paytwice/web/room"
	"paytwice/web/room/step"
)

// TestPuzzlePlayStaysCountedWhenAnotherServerLetOneGo: a Play reaches
// two servers that hold the puzzle's requests. The first counts it, then
// finds its own requests gone by themselves and lets none go; the second
// finds it counted and lets one go. The step happened, so the Play stays
// counted once, whichever of the two settles first; a Play that let none
// go on any server is taken back.
func TestPuzzlePlayStaysCountedWhenAnotherServerLetOneGo(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, Config{})
	rm := env.Server.room
	ctx := context.Background()
	if _, _, err := rm.Change(ctx, func(s *room.State) error {
		s.SetLesson("check-then-insert")
		s.StartPuzzle("anonymous", "PP-1", "order PP-1", 0)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	first := []step.HeldRequest{{Request: "rq_first", Scope: "anonymous", OrderID: "PP-1"}}
	second := []step.HeldRequest{{Request: "rq_second", Scope: "anonymous", OrderID: "PP-1"}}
	count := countHeldPlay(rm) // each server's, on the room they share
	steps := func() int { return rm.Load().Puzzle.Steps }

	for i, c := range []struct {
		name           string
		takenBackFirst bool
	}{
		{"the counter takes it back, then the other lets one go", true},
		{"the other lets one go, then the counter would take it back", false},
	} {
		before := steps()
		play := "play-" + string(rune('a'+i))
		counter := count(ctx, play, first)
		other := count(ctx, play, second)
		if got := steps(); got != before+1 {
			t.Fatalf("%s: %d steps once both servers counted, want %d: one Play, one step", c.name, got, before+1)
		}
		if c.takenBackFirst {
			counter(false)
			other(true)
		} else {
			other(true)
			counter(false)
		}
		if got := steps(); got != before+1 {
			t.Errorf("%s: %d steps, want %d: a server let one go on the Play", c.name, got, before+1)
		}
	}

	before := steps()
	counter := count(ctx, "play-none", first)
	other := count(ctx, "play-none", second)
	counter(false)
	other(false)
	if got := steps(); got != before {
		t.Errorf("a Play that let none go anywhere: %d steps, want %d", got, before)
	}
}

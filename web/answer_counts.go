package web

import (
	"context"
	"strings"
	"sync"
	"time"

	"paytwice/pay"
	"paytwice/web/live"
	"paytwice/web/room"
)

// The board's counters of requests, refusals, lost answers, replays, 409s
// and 422s are not in the keys and charges: each server counts its own
// answers (live.Hub.Tally) and keeps them in the books, so that a
// restarted server's board starts from what the room has answered since
// its last reset rather than from zero.

// answerCountsEvery is how often, at most, a server writes its answer
// counts while they change: a server killed outright loses at most this
// much of them, and the board says so.
const answerCountsEvery = time.Second

// answerCountsWrite bounds one write of the counts, at shutdown too.
const answerCountsWrite = 5 * time.Second

// answerCounts is this server's side of the kept counts: what it
// counts (the hub's tally), the books it keeps them in, and the room,
// whose resets start them again and whose members say which servers
// still run.
type answerCounts struct {
	mu    sync.Mutex // one write at a time, in order
	saved live.Tally // what the books hold of this server's life

	tally answerTally
	books answerBooks
	room  *room.Room[room.State]
	// shared says the database is shared with other servers.
	shared bool
	logf   func(format string, args ...any)
}

// answerTally is the live hub as it counts this server's answers.
type answerTally interface {
	Tally() (t live.Tally, seq uint64)
	RestartTally(gen uint64)
	Epoch() string
}

// answerBooks keep every server's answer counts.
type answerBooks interface {
	SaveAnswerCounts(ctx context.Context, origin string, gen uint64, c pay.AnswerCounts) error
	AnswerCounts(ctx context.Context, gen uint64) (map[string]pay.AnswerCounts, error)
}

// restart starts this server's counts for the room's current reset: at
// start, and on every reset (serverMemory.reset).
func (a *answerCounts) restart() { a.tally.RestartTally(a.room.Load().Resets) }

// keep writes this server's answer counts to the books every
// answerCountsEvery while they change, until ctx ends; Close writes them
// a last time.
func (a *answerCounts) keep(ctx context.Context) {
	t := time.NewTicker(answerCountsEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			a.save(ctx)
		}
	}
}

// save writes this server's counts if they changed since the
// last write.
func (a *answerCounts) save(ctx context.Context) {
	a.mu.Lock()
	defer a.mu.Unlock()
	t, _ := a.tally.Tally()
	if t == a.saved {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, answerCountsWrite)
	defer cancel()
	if err := a.books.SaveAnswerCounts(ctx, a.tally.Epoch(), t.Gen, payCounts(t)); err != nil {
		a.logf("keeping the answer counts: %v", err)
		return
	}
	a.saved = t
}

// kept adds up what the books keep of the room's reset gen
// for the lives of servers whose answers this server's board will not
// see as events: this server's earlier lives and the servers of the room
// that stopped. A server of the room that still runs is left out: its
// answers so far cannot be told apart from those its relay is still
// bringing here. The member list is only a good guess of that, so the
// sum can be off either way by the answers in flight, and the board says
// so (views/live.templ): a server that starts while others run counts
// their answers from then on; a server whose PostgreSQL session drops for
// a moment leaves the list and is added from its kept row while its
// relayed answers are counted too; and a stopping server's last relayed
// answers may arrive after its last save and be counted twice.
func (a *answerCounts) kept(ctx context.Context, gen uint64) live.Tally {
	ctx, cancel := context.WithTimeout(ctx, answerCountsWrite)
	defer cancel()
	kept, err := a.books.AnswerCounts(ctx, gen)
	if err != nil {
		a.logf("reading the kept answer counts: %v", err)
		return live.Tally{}
	}
	running := map[string]bool{a.tally.Epoch(): true}
	if a.shared {
		members, err := a.room.Members(ctx)
		if err != nil {
			// Which servers run is unknown: count none of the others rather
			// than perhaps one twice.
			a.logf("listing the room's servers for the kept answer counts: %v", err)
			return live.Tally{}
		}
		for _, m := range members {
			id, _, _ := strings.Cut(m, " ")
			running[id] = true
		}
	}
	var sum live.Tally
	for origin, c := range kept {
		if !running[origin] {
			sum = sum.Plus(liveCounts(c))
		}
	}
	return sum
}

func payCounts(t live.Tally) pay.AnswerCounts {
	return pay.AnswerCounts{Requests: t.Requests, Rejected: t.Rejected, Lost: t.Lost,
		Replays: t.Replays, Conflicts: t.Conflicts, Mismatches: t.Mismatches}
}

func liveCounts(c pay.AnswerCounts) live.Tally {
	return live.Tally{Requests: c.Requests, Rejected: c.Rejected, Lost: c.Lost,
		Replays: c.Replays, Conflicts: c.Conflicts, Mismatches: c.Mismatches}
}

package web

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"paytwice/pay"
	"paytwice/web/live"
	"paytwice/web/room"
)

// The common-mistakes lab. Each of the article's common mistakes can be
// switched on, and then really happens: the server-side ones change how
// POST /v1/payments itself behaves (lab_naive.go), the client-side ones
// change what every browser's pay.js sends. Nothing is animated: every
// double charge the lab shows is a row in the database. The switches are
// the room's (room.LabSettings); this file is their API and what the lab
// counts itself.

// labKind and lessonKind are the events the lab and the lessons publish.
// The projector draws them as notes on the timeline.
const (
	labKind    live.Kind = "lab"
	lessonKind live.Kind = "lesson"
)

// mistakesLab is the lab's group: its switches (the room's), the running
// counts of its tables, what it counts itself, its locks in memory and
// the keys made of personal data it saw. The lab's handlers
// (lab_handlers.go), the payments in a lab mode (lab_naive.go), the board
// and a reset use it; it holds only what the lab uses.
type mistakesLab struct {
	switches labSwitches
	// tally counts the charge tables as charges are written.
	tally *labTally
	// counts are what the lab counts itself (the rest is read from the
	// database).
	counts labCounters
	// locks are the memory_lock mode's.
	locks memoryLocks
	// personal are the keys made of personal data the lab saw.
	personal *personalKeys
	// store is the payments database: the lab's prune, and the rows its
	// tally is rebuilt from.
	store labStore
	// timeline is where the lab tells what it did, and whose newest
	// event its numbers are stamped with.
	timeline labTimeline
	// now is the room's clock; retention the server's own (-retention),
	// which the lab's switch may shorten.
	now       func() time.Time
	retention time.Duration
	// check runs the checker from the lab page (lab_check.go).
	check *labChecker
}

// labStore is what the lab needs of the payments database.
type labStore interface {
	Prune(ctx context.Context, cutoff time.Time) (pay.Pruned, error)
	labRows
}

// labTimeline is what the lab needs of the live hub.
type labTimeline interface {
	timeline
	LastSeq() uint64
}

// labCounters are what the lab counts itself.
type labCounters struct {
	constraintRefusals atomic.Int64 // INSERTs the primary key refused
	reconciliations    atomic.Int64 // GET /v1/payments?order_id=…
	pruned             atomic.Int64 // keys the lab's prune removed
	refusals           refusalCounts
}

// clear starts every count again from zero.
func (c *labCounters) clear() {
	for _, n := range []*atomic.Int64{&c.constraintRefusals, &c.reconciliations, &c.pruned} {
		n.Store(0)
	}
	c.refusals.clear()
}

// refusalCounts are the 400 and 422 answers, and those among them that
// repeated an answer the caller already had.
type refusalCounts struct {
	refusals atomic.Int64
	wasted   atomic.Int64
	mu       sync.Mutex
	seen     map[refusalKey]int
}

type refusalKey struct {
	scope, key string
	status     int
}

// count counts a 400 or 422, and a wasted attempt when the same caller
// already had this answer for this key: nothing changed, so sending it
// again could not help.
func (rc *refusalCounts) count(scope, key string, status int) {
	rc.refusals.Add(1)
	k := refusalKey{scope, key, status}
	rc.mu.Lock()
	n := rc.seen[k]
	if n > 0 || len(rc.seen) < labMaxTracked {
		rc.seen[k] = n + 1
	}
	rc.mu.Unlock()
	if n > 0 {
		rc.wasted.Add(1)
	}
}

func (rc *refusalCounts) clear() {
	rc.refusals.Store(0)
	rc.wasted.Store(0)
	rc.mu.Lock()
	clear(rc.seen)
	rc.mu.Unlock()
}

// memoryLocks are the in-memory locks of the memory_lock mode: this
// server's, and, on a server with its database to itself, those of the
// second server it runs inside the process when the lab asks for two
// (inProcessServer). door deals the requests to them in turn.
type memoryLocks struct {
	mine  *keyLocks
	twin  *keyLocks
	door  atomic.Uint64
	waits atomic.Int64 // requests that waited for a lock
}

// labMaxTracked bounds the maps of the lab's own counts.
const labMaxTracked = 10_000

// newMistakesLab is the lab of the room r. keyPlaces are the databases
// its scan for keys made of personal data reads (the payments store, and
// the ledger when it is a database of its own).
func newMistakesLab(switches labSwitches, store labStore, hub *live.Hub, keyPlaces []keyScanner, now func() time.Time, retention time.Duration) *mistakesLab {
	l := &mistakesLab{switches: switches, tally: newLabTally(), store: store, timeline: hub, now: now, retention: retention,
		personal: newPersonalKeys(hub, keyPlaces)}
	l.counts.refusals.seen = map[refusalKey]int{}
	l.locks.mine, l.locks.twin = newKeyLocks(labMaxTracked), newKeyLocks(labMaxTracked)
	return l
}

// Settings returns the lab's current settings: the room's.
func (l *mistakesLab) Settings() room.LabSettings { return l.switches.Settings() }

// labSwitches are the lab's switches as the server reads and changes
// them: the room's. Every change is told on the timeline.
type labSwitches struct {
	room     *room.Room[room.State]
	timeline timeline
	// workLimit is the gateway time-out: the lab's pauses must fit in a
	// request's work.
	workLimit time.Duration
}

// Settings returns the lab's current settings: the room's.
func (ls labSwitches) Settings() room.LabSettings { return ls.room.Load().Lab }

// apply validates new settings and makes them the whole room's,
// publishing what changed. The page and the JSON API come through here.
func (ls labSwitches) apply(ctx context.Context, next room.LabSettings, who string) error {
	next = next.Normalize()
	if err := next.Validate(); err != nil {
		return err
	}
	old, changed, err := ls.room.Change(ctx, func(r *room.State) error {
		r.Lab = next
		return r.WorkFits(ls.workLimit)
	})
	if err != nil {
		return err
	}
	ls.publishChanges(old.Lab, changed.Lab, who)
	return nil
}

// publishChanges says on the timeline what changed between old and next,
// if anything did.
func (ls labSwitches) publishChanges(old, next room.LabSettings, who string) {
	if changes := room.LabChanges(old, next); len(changes) > 0 {
		msg := "lab: " + strings.Join(changes, "; ")
		if who != "" {
			msg = who + ": " + msg
		}
		ls.timeline.Publish(live.Event{Kind: labKind, Message: msg})
	}
}

// patch merges body into the room's lab settings as they are when the
// change holds the room, and returns the settings after it.
func (ls labSwitches) patch(ctx context.Context, body []byte, who string) (room.LabSettings, error) {
	old, next, err := ls.room.Change(ctx, func(r *room.State) error {
		l := r.Lab
		if err := decodeStrict(body, &l); err != nil {
			return err
		}
		l = l.Normalize()
		if err := l.Validate(); err != nil {
			return err
		}
		r.Lab = l
		return r.WorkFits(ls.workLimit)
	})
	if err != nil {
		return room.LabSettings{}, err
	}
	ls.publishChanges(old.Lab, next.Lab, who)
	return next.Lab, nil
}

// clear empties what the lab counts itself. The lab's settings and the
// lesson are the room's, which a reset sets (resetDemo).
func (l *mistakesLab) clear() {
	l.counts.clear()
	l.locks.waits.Store(0)
	l.personal.clear()
	l.tablesChanged()
}

// observePayment counts what the lab measures about every payment
// request, whatever mode runs it: a key that looks like personal data is
// flagged. It returns the request's key, "" when it has none or a bad one.
func (l *mistakesLab) observePayment(r *http.Request) string {
	key, _ := pay.ParseKey(r.Header.Values("Idempotency-Key"))
	if kind := pay.PersonalData(key); kind != "" {
		l.personal.flag(callerScope(r), key, kind)
	}
	return key
}

// prune prunes done keys now, with the lab's retention if one is set,
// and says so on the timeline. With the time warp it shows what a short
// retention does to a late retry.
func (l *mistakesLab) prune(ctx context.Context) (LabPruneReport, error) {
	retention := l.retention
	if sec := l.Settings().Server.RetentionSeconds; sec > 0 {
		retention = time.Duration(sec) * time.Second
	}
	pruned, err := l.store.Prune(ctx, l.now().Add(-retention))
	// A prune that stopped part way deleted its first batches all the
	// same: the lab counts them and the pages hear of them before the
	// error is answered.
	if err != nil && pruned.Keys == 0 {
		return LabPruneReport{}, err
	}
	l.counts.pruned.Add(int64(pruned.Keys))
	if pruned.Keys > 0 {
		l.tablesChanged()
	}
	e := live.Event{Kind: live.Pruned, Message: fmt.Sprintf("lab: %d done key(s) older than %s pruned; a retry with one of them is now a new request", pruned.Keys, retention)}
	if pruned.Keys == 1 {
		e.Scope, e.Key = pruned.First.Scope, pruned.First.Key
	}
	l.timeline.Publish(e)
	if err != nil {
		return LabPruneReport{}, err
	}
	return LabPruneReport{RetentionSeconds: int64(retention / time.Second), Pruned: pruned.Keys, Now: l.now().UTC()}, nil
}

// LabPruneReport is the body of POST /api/lab/prune.
type LabPruneReport struct {
	RetentionSeconds int64     `json:"retention_seconds"`
	Pruned           int       `json:"pruned"`
	Now              time.Time `json:"now"`
}

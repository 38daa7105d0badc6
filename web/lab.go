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

// labState is the lab's part of the server.
type labState struct {
	// room holds the lab's settings and the lesson.
	room *room.Room[room.State]
	// flagPersonal says on the timeline that a key looks like personal
	// data (flagPersonalKey).
	flagPersonal func(scope, key, kind string)

	// What the server counts itself (the rest is read from the database).
	constraintRefusals atomic.Int64 // INSERTs the primary key refused
	reconciliations    atomic.Int64 // GET /v1/payments?order_id=…
	pruned             atomic.Int64 // keys the lab's prune removed
	refusals4xx        atomic.Int64 // 400 and 422 answers
	wasted4xx          atomic.Int64 // … that repeated an answer the caller already had
	personalRequests   atomic.Int64 // requests whose key looked like personal data
	lockWaits          atomic.Int64 // requests that waited for the in-memory lock

	// locks are the in-memory locks of the memory_lock mode: this
	// server's, and, on a server with its database to itself, those of
	// the second server it runs inside the process when the lab asks for
	// two (server.servers). door deals the requests to them in turn.
	locks *keyLocks
	twin  *keyLocks
	door  atomic.Uint64

	seenMu   sync.Mutex
	seen4xx  map[refusalKey]int
	personal map[string]string // scope|key → what kind of personal data

	// tally counts the charge tables as charges are written.
	tally *labTally
	// personalOut is the last scan for keys made of personal data, made
	// at event personalSeq while the tables were at version personalGen
	// (labTablesChanged moves tablesGen).
	personalMu  sync.Mutex
	personalOut LabPersonalOutcome
	personalSeq uint64
	personalGen uint64
	tablesGen   atomic.Uint64
	// personalElsewhere says another server flagged a key of personal
	// data since the last reset, and personalStored that the last scan
	// found some in the tables: either puts such keys in play for the
	// other servers' writes (otherServersWrote).
	personalElsewhere atomic.Bool
	personalStored    atomic.Bool
}

type refusalKey struct {
	scope, key string
	status     int
}

// labMaxTracked bounds the maps of the lab's own counts.
const labMaxTracked = 10_000

func newLab(r *room.Room[room.State], flagPersonal func(scope, key, kind string)) *labState {
	l := &labState{room: r, flagPersonal: flagPersonal, seen4xx: map[refusalKey]int{}, personal: map[string]string{}, locks: newKeyLocks(labMaxTracked), twin: newKeyLocks(labMaxTracked), tally: newLabTally()}
	return l
}

// Settings returns the lab's current settings: the room's.
func (l *labState) Settings() room.LabSettings { return l.room.Load().Lab }

// Lesson returns the chapter the class is on, "" when none: the room's.
func (l *labState) Lesson() string { return l.room.Load().Lesson }

// Lab returns the lab's current settings.
func (s *Server) Lab() room.LabSettings { return s.lab.Settings() }

// applyLab validates new settings and makes them the whole room's,
// publishing what changed. The page and the JSON API come through here.
func (s *Server) applyLab(ctx context.Context, next room.LabSettings, who string) error {
	next = next.Normalize()
	if err := next.Validate(); err != nil {
		return err
	}
	old, changed, err := s.room.Change(ctx, func(r *room.State) error {
		r.Lab = next
		return r.WorkFits(s.cfg.GatewayTimeout)
	})
	if err != nil {
		return err
	}
	s.publishLabChanges(old.Lab, changed.Lab, who)
	return nil
}

// publishLabChanges says on the timeline what changed between old and
// next, if anything did.
func (s *Server) publishLabChanges(old, next room.LabSettings, who string) {
	if changes := room.LabChanges(old, next); len(changes) > 0 {
		msg := "lab: " + strings.Join(changes, "; ")
		if who != "" {
			msg = who + ": " + msg
		}
		s.hub.Publish(live.Event{Kind: labKind, Message: msg})
	}
}

// patchLab merges body into the room's lab settings as they are when the
// change holds the room, and returns the settings after it.
func (s *Server) patchLab(ctx context.Context, body []byte, who string) (room.LabSettings, error) {
	old, next, err := s.room.Change(ctx, func(r *room.State) error {
		l := r.Lab
		if err := decodeStrict(body, &l); err != nil {
			return err
		}
		l = l.Normalize()
		if err := l.Validate(); err != nil {
			return err
		}
		r.Lab = l
		return r.WorkFits(s.cfg.GatewayTimeout)
	})
	if err != nil {
		return room.LabSettings{}, err
	}
	s.publishLabChanges(old.Lab, next.Lab, who)
	return next.Lab, nil
}

// labSettings are the lab's switches: the room's.
func (s *Server) labSettings() room.LabSettings { return s.lab.Settings() }

// clearLabCounts empties what the lab counts itself. The lab's settings
// and the lesson are the room's, which a reset sets (resetDemo).
func (s *Server) clearLabCounts() {
	l := s.lab
	for _, n := range []*atomic.Int64{&l.constraintRefusals, &l.reconciliations, &l.pruned, &l.refusals4xx, &l.wasted4xx, &l.personalRequests, &l.lockWaits} {
		n.Store(0)
	}
	l.seenMu.Lock()
	clear(l.seen4xx)
	clear(l.personal)
	l.seenMu.Unlock()
	l.personalElsewhere.Store(false)
	s.labTablesChanged()
}

// observePayment counts what the lab measures about every payment
// request, whatever mode runs it: a key that looks like personal data is
// flagged. It returns the request's key, "" when it has none or a bad one.
func (l *labState) observePayment(r *http.Request) string {
	key, _ := pay.ParseKey(r.Header.Values("Idempotency-Key"))
	if kind := pay.PersonalData(key); kind != "" {
		l.flagPersonal(callerScope(r), key, kind)
	}
	return key
}

// countRefusal counts a 400 or 422, and a wasted attempt when the same
// caller already had this answer for this key: nothing changed, so
// sending it again could not help.
func (l *labState) countRefusal(scope, key string, status int) {
	l.refusals4xx.Add(1)
	k := refusalKey{scope, key, status}
	l.seenMu.Lock()
	n := l.seen4xx[k]
	if n > 0 || len(l.seen4xx) < labMaxTracked {
		l.seen4xx[k] = n + 1
	}
	l.seenMu.Unlock()
	if n > 0 {
		l.wasted4xx.Add(1)
	}
}

// flagPersonalKey accepts a key that looks like personal data (a real
// server has no way to refuse it) and says so on the timeline, once per
// key: the event itself carries the key onto every screen, which is the
// point.
func (s *Server) flagPersonalKey(scope, key, kind string) {
	s.lab.personalRequests.Add(1)
	id := scope + "|" + key
	s.lab.seenMu.Lock()
	_, seen := s.lab.personal[id]
	if !seen && len(s.lab.personal) < labMaxTracked {
		s.lab.personal[id] = kind
	}
	s.lab.seenMu.Unlock()
	if seen {
		return
	}
	s.hub.Publish(live.Event{Kind: labKind, Scope: scope, Key: key,
		Message: "flagged: this key looks like " + kind + ". It is accepted, and now stored in the key table, on the charge, in the gateway's ledger, on this timeline and in its export."})
}

// labPrune prunes done keys now, with the lab's retention if one is set,
// and says so on the timeline. With the time warp it shows what a short
// retention does to a late retry.
func (s *Server) labPrune(ctx context.Context) (LabPruneReport, error) {
	retention := s.cfg.Retention
	if sec := s.lab.Settings().Server.RetentionSeconds; sec > 0 {
		retention = time.Duration(sec) * time.Second
	}
	pruned, err := s.db.Prune(ctx, s.clock.Now().Add(-retention))
	// A prune that stopped part way deleted its first batches all the
	// same: the lab counts them and the pages hear of them before the
	// error is answered.
	if err != nil && pruned.Keys == 0 {
		return LabPruneReport{}, err
	}
	s.lab.pruned.Add(int64(pruned.Keys))
	if pruned.Keys > 0 {
		s.labTablesChanged()
	}
	e := live.Event{Kind: live.Pruned, Message: fmt.Sprintf("lab: %d done key(s) older than %s pruned; a retry with one of them is now a new request", pruned.Keys, retention)}
	if pruned.Keys == 1 {
		e.Scope, e.Key = pruned.First.Scope, pruned.First.Key
	}
	s.hub.Publish(e)
	if err != nil {
		return LabPruneReport{}, err
	}
	return LabPruneReport{RetentionSeconds: int64(retention / time.Second), Pruned: pruned.Keys, Now: s.clock.Now().UTC()}, nil
}

// LabPruneReport is the body of POST /api/lab/prune.
type LabPruneReport struct {
	RetentionSeconds int64     `json:"retention_seconds"`
	Pruned           int       `json:"pruned"`
	Now              time.Time `json:"now"`
}

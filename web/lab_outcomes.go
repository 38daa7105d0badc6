package web

import (
	"context"
	"encoding/json"
	"hash/fnv"
	"strings"
	"time"

	"paytwice/pay"
	"paytwice/views"
	"paytwice/web/lab"
	"paytwice/web/live"
	"paytwice/web/room"
)

// What the lab measures is declared with its table (web/lab): these are
// the names the JSON API and the lab's counts use for it.
type (
	LabChargeOutcome    = lab.ChargeOutcome
	LabRaceOutcome      = lab.RaceOutcome
	LabLockOutcome      = lab.LockOutcome
	LabRefusalOutcome   = lab.RefusalOutcome
	LabReconcileOutcome = lab.ReconcileOutcome
	LabPersonalOutcome  = lab.PersonalOutcome
	LabPruneOutcome     = lab.PruneOutcome
	LabOutcomes         = lab.Outcomes
)

// labOutcomes answers from the lab's running counts (lab_tally.go) and
// its own counters: no table is read unless the counts must be rebuilt.
func (s *Server) labOutcomes(ctx context.Context) (LabOutcomes, error) {
	l := s.lab
	seq := s.hub.LastSeq()
	var o LabOutcomes
	if err := l.tally.read(ctx, s.db, func(c *labCounts) { o = c.outcomes() }); err != nil {
		return LabOutcomes{}, err
	}
	o.Seq = seq
	o.CheckThenInsert.ConstraintRefusals = l.constraintRefusals.Load()
	o.MemoryLock.LockWaits, o.MemoryLock.KeysLocked = l.lockWaits.Load(), l.locks.len()
	o.NewKeyAfter500.Reconciliations = l.reconciliations.Load()
	o.RetryEvery4xx = LabRefusalOutcome{Refusals: l.refusals4xx.Load(), WastedAttempts: l.wasted4xx.Load()}
	o.PruneTooSoon.Pruned, o.PruneTooSoon.RetentionSeconds = l.pruned.Load(), int64(s.cfg.Retention.Seconds())
	if sec := l.Settings().Server.RetentionSeconds; sec > 0 {
		o.PruneTooSoon.RetentionSeconds = sec
	}
	var err error
	if o.PersonalDataKey, err = s.personalOutcomeCached(ctx, seq); err != nil {
		return LabOutcomes{}, err
	}
	_, o.ExtraCharges = lab.Read(o)
	return o, nil
}

// labTablesChanged says the tables changed in a way this server's own
// writes do not tell (a reset, a prune, another server's write): the
// counts are rebuilt at the next question.
func (s *Server) labTablesChanged() {
	s.lab.tally.invalidate()
	s.lab.tablesGen.Add(1)
}

// otherServersWrote is labTablesChanged for the writes of one
// notification of other servers' events (changesLabCounts): the counts
// are rebuilt all the same, but the scan for keys made of personal data,
// which reads three tables whole, runs again only when the tables may
// hold more or fewer of them than it found: keys were removed, events
// were missed, or such keys are in play (a server flagged one, or the
// last scan found some). Without that, every payment of another server
// made the next page view scan the tables.
func (s *Server) otherServersWrote(batch []live.Entry) {
	l := s.lab
	l.tally.invalidate()
	again := l.personalRequests.Load() > 0 || l.personalElsewhere.Load() || l.personalStored.Load()
	for i := range batch {
		switch e := &batch[i]; {
		case e.Kind == labKind && e.Key != "" && pay.PersonalData(e.Key) != "":
			l.personalElsewhere.Store(true)
			again = true
		case e.Kind == live.Pruned, e.Kind == live.Gap, e.Kind == live.Reset:
			again = true
		}
	}
	if again {
		l.tablesGen.Add(1)
	}
}

// personalOutcomeCached scans for keys made of personal data only while
// such keys are in play: once per event after a request on this server
// carried one, else once after each change labTablesChanged (or, for
// other servers' writes, otherServersWrote) reports: no other write can
// store such a key.
func (s *Server) personalOutcomeCached(ctx context.Context, seq uint64) (LabPersonalOutcome, error) {
	l := s.lab
	l.personalMu.Lock()
	defer l.personalMu.Unlock()
	gen := l.tablesGen.Load() + 1 // 0: never scanned
	if l.personalGen == gen && (l.personalRequests.Load() == 0 || l.personalSeq == seq) {
		return l.personalOut, nil
	}
	o, err := s.personalOutcome(ctx)
	if err != nil {
		return o, err
	}
	l.personalOut, l.personalSeq, l.personalGen = o, seq, gen
	l.personalStored.Store(o.Stored[pay.WhereKeyTable]+o.Stored[pay.WhereCharges]+o.Stored[pay.WhereGateway] > 0)
	return o, nil
}

// personalOutcome finds keys made of personal data wherever keys are
// kept: the tables of both files, and the events the timeline holds.
func (s *Server) personalOutcome(ctx context.Context) (LabPersonalOutcome, error) {
	o := LabPersonalOutcome{Requests: s.lab.personalRequests.Load(), Stored: map[string]int{
		pay.WhereKeyTable: 0, pay.WhereCharges: 0, pay.WhereGateway: 0}}
	s.lab.seenMu.Lock()
	o.Keys = len(s.lab.personal)
	s.lab.seenMu.Unlock()
	count := func(where, key string) {
		if pay.PersonalData(key) != "" {
			o.Stored[where]++
		}
	}
	if err := s.db.LabScanKeys(ctx, count); err != nil {
		return o, err
	}
	if s.ledgerApart() {
		if err := s.world.ledger.LabScanKeys(ctx, count); err != nil {
			return o, err
		}
	}
	for _, e := range s.hub.Recent(live.DefaultSize) {
		if e.Key != "" && pay.PersonalData(e.Key) != "" {
			o.TimelineEvents++
		}
	}
	return o, nil
}

// labViewOutcomes turns the measurements into what the panel draws, by
// the mistake's name (lab.Mistake.Outcome).
func labViewOutcomes(o LabOutcomes) map[string]views.LabOutcome {
	read, _ := lab.Read(o)
	out := make(map[string]views.LabOutcome, len(read))
	for name, d := range read {
		out[name] = views.LabOutcome{N: d.N, Unit: d.Unit, Tone: views.Tone(d.Tone), Lines: d.Lines}
	}
	return out
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// labRetentions are the key retentions the panel offers: 0 (the server's
// own) and the lab's two.
var labRetentions = []int64{0, room.LabShortRetentionSeconds, room.LabLongRetentionSeconds}

// labSwitchesView is the settings as the panel shows them.
func (s *Server) labSwitchesView(l room.LabSettings) views.LabSwitches {
	def := lab.RetentionWords(int64(s.cfg.Retention.Seconds()))
	on := lab.On(l, lab.RetentionText(l.Server.RetentionSeconds, def))
	if l.Server.Mode == room.LabMemoryLock {
		// Say which servers hold the locks: what this room runs.
		for i, o := range on {
			if strings.HasPrefix(o, "8 ") {
				on[i] = o + s.memoryLockServers(l)
			}
		}
	}
	return views.LabSwitches{Mode: l.Server.Mode, Retentions: labRetentions, CheckGapMS: l.Server.CheckGapMS, RetentionSeconds: l.Server.RetentionSeconds,
		Servers: l.Server.Servers, DefaultRetention: def, Client: lab.ClientSwitches(l.Client), On: on}
}

// memoryLockServers says which servers run the lock in memory here: the
// servers of a cluster, two inside this process, or this one alone.
func (s *Server) memoryLockServers(l room.LabSettings) string {
	switch {
	case s.servers.peers.Shared():
		return ": each server of the cluster, its own lock"
	case l.Server.Servers >= 2:
		return ": two servers inside this process, each with its own memory, take the requests in turn"
	}
	return ": one server"
}

// labSettingsVersion names the lab's settings l for the pages, which ask
// for the panel again when it changes: a hash, the same on every server,
// of at most 53 bits, as the pages read it as a JavaScript number.
func labSettingsVersion(l room.LabSettings) uint64 {
	h := fnv.New64a()
	_ = json.NewEncoder(h).Encode(l)
	return h.Sum64() & (1<<53 - 1)
}

// labView is the whole lab panel for one viewer. If the measurement fails
// the panel still draws, with the switches and without numbers.
func (s *Server) labView(ctx context.Context, presenter bool) views.Lab {
	settingsV := labSettingsVersion(s.lab.Settings())
	v := views.Lab{Switches: s.labSwitchesView(s.lab.Settings()), BurstSize: room.LabBurstSize, WarpSeconds: room.LabWarpSeconds, Presenter: presenter,
		Locked: s.cfg.PresenterToken != "", SettingsV: settingsV}
	if o, err := s.labOutcomes(ctx); err != nil {
		s.logf("lab: measuring: %v", err)
	} else {
		v.Outcomes, v.ExtraCharges, v.OutcomesV = labViewOutcomes(o), o.ExtraCharges, o.Seq
	}
	return v
}

// LabLive is the body of GET /lab/live: the versions the page now has,
// and the HTML of the parts that changed, by element id.
type LabLive struct {
	V    map[string]uint64 `json:"v"`
	HTML map[string]string `json:"html"`
	// Now is the demo clock in Unix milliseconds, sent when the room
	// changed.
	Now int64 `json:"now,omitempty"`
}

// roomEpoch returns how many resets the room has had (each chapter starts
// with one), the books it keeps (room.State.Books) and the version of the
// room this server applied.
func (s *Server) roomEpoch() (resets, books, version uint64) {
	st, v, _ := s.room.Watch()
	return st.Resets, st.Books, uint64(max(v, 0))
}

// currentLesson is the chapter the class is on, "" when none.
func (s *Server) currentLesson() string { return s.lab.Lesson() }

// lessonVersion names the lesson panel's state: it changes when an item
// is ticked or the chapter changes.
func (s *Server) lessonVersion() uint64 { return s.teaching.narration.Version() }

// now is the demo clock.
func (s *Server) now() time.Time { return s.clock.Now() }

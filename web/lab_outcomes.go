package web

import (
	"context"
	"encoding/json"
	"hash/fnv"
	"strings"
	"time"

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

// outcomes answers from the lab's running counts (lab_tally.go, lab_counts.go) and its
// own counters: no table is read unless the counts must be rebuilt.
func (l *mistakesLab) outcomes(ctx context.Context) (LabOutcomes, error) {
	seq := l.timeline.LastSeq()
	var o LabOutcomes
	if err := l.tally.read(ctx, l.store, func(c *labCounts) { o = c.outcomes() }); err != nil {
		return LabOutcomes{}, err
	}
	o.Seq = seq
	o.CheckThenInsert.ConstraintRefusals = l.counts.constraintRefusals.Load()
	o.MemoryLock.LockWaits, o.MemoryLock.KeysLocked = l.locks.waits.Load(), l.locks.mine.len()
	o.NewKeyAfter500.Reconciliations = l.counts.reconciliations.Load()
	o.RetryEvery4xx = LabRefusalOutcome{Refusals: l.counts.refusals.refusals.Load(), WastedAttempts: l.counts.refusals.wasted.Load()}
	o.PruneTooSoon.Pruned, o.PruneTooSoon.RetentionSeconds = l.counts.pruned.Load(), int64(l.retention.Seconds())
	if sec := l.Settings().Server.RetentionSeconds; sec > 0 {
		o.PruneTooSoon.RetentionSeconds = sec
	}
	var err error
	if o.PersonalDataKey, err = l.personal.outcomeCached(ctx, seq); err != nil {
		return LabOutcomes{}, err
	}
	_, o.ExtraCharges = lab.Read(o)
	return o, nil
}

// tablesChanged says the tables changed in a way this server's own
// writes do not tell (a reset, a prune, another server's write): the
// counts are rebuilt at the next question.
func (l *mistakesLab) tablesChanged() {
	l.tally.invalidate()
	l.personal.tablesGen.Add(1)
}

// otherServersWrote is tablesChanged for the writes of one notification
// of other servers' events (changesLabCounts): the counts are rebuilt all
// the same, but the scan for keys made of personal data runs again only
// when it may find another number (personalKeys.otherServersWrote).
func (l *mistakesLab) otherServersWrote(batch []live.Entry) {
	l.tally.invalidate()
	l.personal.otherServersWrote(batch)
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

// labPanel is the lab's panel as the pages draw it: the lab, and what
// the panel says of the server it runs on.
type labPanel struct {
	lab *mistakesLab
	// shared says the database is shared with other servers: the lock in
	// memory then runs on each of them.
	shared bool
	// locked says a presenter's token is required to change the switches.
	locked bool
	logf   func(format string, args ...any)
}

// labPanel is the server's lab as its pages draw it.
func (s *Server) labPanel() labPanel {
	return labPanel{lab: s.lab, shared: s.servers.peers.Shared(), locked: s.cfg.PresenterToken != "", logf: s.logf}
}

// switchesView is the settings as the panel shows them.
func (p labPanel) switchesView(l room.LabSettings) views.LabSwitches {
	def := lab.RetentionWords(int64(p.lab.retention.Seconds()))
	on := lab.On(l, lab.RetentionText(l.Server.RetentionSeconds, def))
	if l.Server.Mode == room.LabMemoryLock {
		// Say which servers hold the locks: what this room runs.
		for i, o := range on {
			if strings.HasPrefix(o, "8 ") {
				on[i] = o + p.memoryLockServers(l)
			}
		}
	}
	return views.LabSwitches{Mode: l.Server.Mode, Retentions: labRetentions, CheckGapMS: l.Server.CheckGapMS, RetentionSeconds: l.Server.RetentionSeconds,
		Servers: l.Server.Servers, DefaultRetention: def, Client: lab.ClientSwitches(l.Client), On: on}
}

// memoryLockServers says which servers run the lock in memory here: the
// servers of a cluster, two inside this process, or this one alone.
func (p labPanel) memoryLockServers(l room.LabSettings) string {
	switch {
	case p.shared:
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

// view is the whole lab panel for one viewer. If the measurement fails
// the panel still draws, with the switches and without numbers.
func (p labPanel) view(ctx context.Context, presenter bool) views.Lab {
	settings := p.lab.Settings()
	v := views.Lab{Switches: p.switchesView(settings), BurstSize: room.LabBurstSize, WarpSeconds: room.LabWarpSeconds, Presenter: presenter,
		Locked: p.locked, SettingsV: labSettingsVersion(settings)}
	if o, err := p.lab.outcomes(ctx); err != nil {
		p.logf("lab: measuring: %v", err)
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

// roomVersions are the room's versions and clock as the live pages ask
// for them after each event (lab_handlers.go's /lab/live, the checkout
// page).
type roomVersions struct {
	room *room.Room[room.State]
	// now is the demo clock.
	now func() time.Time
}

// roomEpoch returns how many resets the room has had (each chapter starts
// with one), the books it keeps (room.State.Books) and the version of the
// room this server applied.
func (rv roomVersions) roomEpoch() (resets, books, version uint64) {
	st, v, _ := rv.room.Watch()
	return st.Resets, st.Books, uint64(max(v, 0))
}

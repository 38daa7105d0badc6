package web

import (
	"bytes"
	"context"
	"encoding/json"
	"hash/fnv"
	"net/http"
	"strconv"

	"github.com/a-h/templ"
	"github.com/labstack/echo/v4"

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
		if err := s.ledger.LabScanKeys(ctx, count); err != nil {
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

// handleLabOutcomes is GET /api/lab/outcomes.
func (s *Server) handleLabOutcomes(c echo.Context) error {
	o, err := s.labOutcomes(c.Request().Context())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, o)
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
	return views.LabSwitches{Mode: l.Server.Mode, Retentions: labRetentions, CheckGapMS: l.Server.CheckGapMS, RetentionSeconds: l.Server.RetentionSeconds,
		DefaultRetention: def, Client: lab.ClientSwitches(l.Client), On: lab.On(l, lab.RetentionText(l.Server.RetentionSeconds, def))}
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

// handleLabLive is GET /lab/live?s=…&o=…&l=…&r=…&c=…: lab.js asks after each
// frame of the event stream, with the versions of the settings, the
// outcomes and the lesson it shows (only those it has on the page). The
// answer is 204 when nothing changed, else the parts to replace. So the
// lab needs no event stream of its own: the page's one connection is
// enough, and between events nothing is sent.
func (s *Server) handleLabLive(c echo.Context) error {
	r := c.Request()
	ctx := r.Context()
	c.Response().Header().Set("Cache-Control", "no-store")
	version := func(name string) (uint64, bool) {
		v := c.QueryParam(name)
		if v == "" {
			return 0, false
		}
		n, err := strconv.ParseUint(v, 10, 64)
		return n, err == nil
	}
	presenter := s.isPresenter(r)
	out := LabLive{V: map[string]uint64{}, HTML: map[string]string{}}
	add := func(id string, comp templ.Component) error {
		var buf bytes.Buffer
		if err := comp.Render(ctx, &buf); err != nil {
			return err
		}
		out.HTML[id] = buf.String()
		return nil
	}

	var panel *views.Lab
	getLab := func() views.Lab {
		if panel == nil {
			v := s.labView(ctx, presenter)
			panel = &v
		}
		return *panel
	}
	if sv, ok := version("s"); ok {
		l := getLab()
		out.V["s"] = l.SettingsV
		if sv != l.SettingsV {
			for _, m := range lab.Mistakes {
				if err := add(views.LabControlID(m), views.LabControls(m, l)); err != nil {
					return err
				}
			}
			if err := add("lab-summary", views.LabSummary(l)); err != nil {
				return err
			}
		}
	}
	if ov, ok := version("o"); ok {
		l := getLab()
		out.V["o"] = l.OutcomesV
		if ov != l.OutcomesV && l.Outcomes != nil {
			for _, m := range lab.Mistakes {
				if err := add(views.LabOutcomeID(m), views.LabOutcomeView(m, l.Outcomes[m.Name])); err != nil {
					return err
				}
			}
			if err := add("lab-summary", views.LabSummary(l)); err != nil {
				return err
			}
		}
	}
	if lv, ok := version("l"); ok {
		cur := s.narration.Version()
		out.V["l"] = cur
		if lv != cur {
			lv := s.lessonView(s.lab.Lesson(), presenter, c.QueryParam("board") == "1")
			if err := add("lesson", views.LessonPanel(lv)); err != nil {
				return err
			}
		}
	}
	// The checkout card asks for the room's resets (r) and changes (c):
	// after a reset it starts a new order, after any change it checks its
	// card against the server (static/pay.js).
	// Every live page asks for the room's changes (c): a change may have
	// moved the demo clock, so the answer carries the clock (now), which
	// keeps the pages' key ages true.
	moved := false
	epoch, changes := s.roomEpoch()
	if c.QueryParam("c") != "" {
		cv, ok := version("c")
		out.V["c"] = changes
		moved = !ok || cv != changes
	}
	if rv, ok := version("r"); ok {
		out.V["r"] = epoch
		moved = moved || rv != epoch
	}
	if moved {
		out.Now = s.clock.Now().UnixMilli()
	}
	if len(out.HTML) == 0 && !moved {
		return c.NoContent(http.StatusNoContent)
	}
	return c.JSON(http.StatusOK, out)
}

// roomEpoch returns how many resets the room has had (each chapter starts
// with one) and the version of the room this server applied.
func (s *Server) roomEpoch() (resets, version uint64) {
	st, v, _ := s.room.Watch()
	return st.Resets, uint64(max(v, 0))
}

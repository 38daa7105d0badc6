package web

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"github.com/a-h/templ"
	"github.com/labstack/echo/v4"

	"paytwice/pay"
	"paytwice/views"
	"paytwice/web/live"
	"paytwice/web/room"
)

// What the lab measures. Every number comes from the database (charges
// per order or per key) or from the server's own count of what it
// answered, never from a page: a page can only show what really happened.

// LabChargeOutcome counts the charges a mistake made.
type LabChargeOutcome struct {
	Charges int `json:"charges"`
	// ChargedTwice is how many orders (or keys, for check-then-insert)
	// were charged more than once.
	ChargedTwice int `json:"charged_twice"`
	// ExtraCharges is every charge after the first of its order (or key).
	ExtraCharges int `json:"extra_charges"`
	// Twice lists what was charged more than once, oldest first.
	Twice []string `json:"twice"`
}

// LabRaceOutcome is check-then-insert's: charges in the unguarded table
// per key, and how many times the constraint refused a loser.
type LabRaceOutcome struct {
	LabChargeOutcome
	KeyRows            int   `json:"key_rows"`
	ConstraintRefusals int64 `json:"constraint_refusals"`
}

// LabLockOutcome is the lock in memory's: charges in the unguarded table
// per key, and how many requests waited for this server's lock.
type LabLockOutcome struct {
	LabChargeOutcome
	// LockWaits counts the requests that waited for this server's lock
	// (each server counts its own).
	LockWaits int64 `json:"lock_waits"`
	// KeysLocked is how many keys this server's lock map holds now:
	// those being worked on or waited for.
	KeysLocked int `json:"keys_locked"`
}

// LabRefusalOutcome counts 400 and 422 answers, and the attempts that got
// one again for the same key.
type LabRefusalOutcome struct {
	Refusals       int64 `json:"refusals"`
	WastedAttempts int64 `json:"wasted_attempts"`
}

// LabReconcileOutcome is a new key after a 500: orders charged under two
// keys where one key saved a 500, and how often clients looked an order
// up instead.
type LabReconcileOutcome struct {
	LabChargeOutcome
	Reconciliations int64 `json:"reconciliations"`
}

// LabPersonalOutcome says where keys made of personal data are now kept.
type LabPersonalOutcome struct {
	// Requests is how many requests carried such a key; Keys how many
	// different keys.
	Requests int64 `json:"requests"`
	Keys     int   `json:"keys"`
	// Stored counts the rows holding one, per table: "key table",
	// "charges", "gateway ledger".
	Stored map[string]int `json:"stored"`
	// TimelineEvents is how many events on the timeline (and so in its
	// export) show one.
	TimelineEvents int `json:"timeline_events"`
}

// LabPruneOutcome is pruning too soon: orders charged again once their key
// was gone.
type LabPruneOutcome struct {
	LabChargeOutcome
	Pruned           int64 `json:"pruned"`
	RetentionSeconds int64 `json:"retention_seconds"`
}

// LabOutcomes is the body of GET /api/lab/outcomes.
type LabOutcomes struct {
	// Seq is the newest event the numbers include.
	Seq             uint64              `json:"seq"`
	NoKey           LabChargeOutcome    `json:"no_key"`
	NewKeyPerRetry  LabChargeOutcome    `json:"new_key_per_retry"`
	CheckThenInsert LabRaceOutcome      `json:"check_then_insert"`
	RetryEvery4xx   LabRefusalOutcome   `json:"retry_every_4xx"`
	NewKeyAfter500  LabReconcileOutcome `json:"new_key_after_500"`
	PersonalDataKey LabPersonalOutcome  `json:"personal_data_key"`
	PruneTooSoon    LabPruneOutcome     `json:"prune_too_soon"`
	MemoryLock      LabLockOutcome      `json:"memory_lock"`
	// ExtraCharges is the sum of every mistake's extra charges.
	ExtraCharges int `json:"extra_charges"`
}

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
	o.ExtraCharges = o.NoKey.ExtraCharges + o.NewKeyPerRetry.ExtraCharges + o.CheckThenInsert.ExtraCharges +
		o.NewKeyAfter500.ExtraCharges + o.PruneTooSoon.ExtraCharges + o.MemoryLock.ExtraCharges
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

// labViewOutcomes turns the measurements into what the panel draws, one
// per mistake in the article's order.
func labViewOutcomes(o LabOutcomes) []views.LabOutcome {
	money := func(n int, charges int) views.Tone {
		switch {
		case n > 0:
			return views.ToneBad
		case charges > 0:
			return views.ToneOK
		}
		return views.ToneMute
	}
	list := func(prefix string, items []string) []string {
		if len(items) == 0 {
			return nil
		}
		const show = 6
		more := ""
		if len(items) > show {
			more = fmt.Sprintf(" and %d more", len(items)-show)
			items = items[:show]
		}
		return []string{prefix + strings.Join(items, ", ") + more}
	}
	var out []views.LabOutcome

	nk := o.NoKey
	out = append(out, views.LabOutcome{N: nk.ChargedTwice, Unit: plural(nk.ChargedTwice, "order charged more than once", "orders charged more than once"),
		Tone: money(nk.ChargedTwice, nk.Charges),
		Lines: append([]string{fmt.Sprintf("%d %s made without a key, %d of them extra.", nk.Charges, plural(nk.Charges, "charge", "charges"), nk.ExtraCharges)},
			list("Charged twice: ", nk.Twice)...)})

	nr := o.NewKeyPerRetry
	out = append(out, views.LabOutcome{N: nr.ChargedTwice, Unit: plural(nr.ChargedTwice, "order paid under more than one key", "orders paid under more than one key"),
		Tone: money(nr.ChargedTwice, nr.Charges),
		Lines: append([]string{fmt.Sprintf("%d extra %s: each new key looked like a new payment to the server.", nr.ExtraCharges, plural(nr.ExtraCharges, "charge", "charges"))},
			list("Charged twice: ", nr.Twice)...)})

	ct := o.CheckThenInsert
	ctTone := money(ct.ChargedTwice, ct.Charges)
	if ct.ChargedTwice == 0 && ct.ConstraintRefusals > 0 {
		ctTone = views.ToneOK
	}
	out = append(out, views.LabOutcome{N: ct.ChargedTwice, Unit: plural(ct.ChargedTwice, "key charged more than once (no constraints)", "keys charged more than once (no constraints)"),
		Tone: ctTone,
		Lines: append([]string{
			fmt.Sprintf("No constraints: %d key %s and %d %s in the unguarded tables.", ct.KeyRows, plural(ct.KeyRows, "row", "rows"), ct.Charges, plural(ct.Charges, "charge", "charges")),
			fmt.Sprintf("Constraints back: the primary key refused %d %s of a key already taken: each one a charge that did not happen.", ct.ConstraintRefusals, plural(int(ct.ConstraintRefusals), "INSERT", "INSERTs")),
		}, list("Charged more than once: ", ct.Twice)...)})

	rf := o.RetryEvery4xx
	rfTone := views.ToneMute
	if rf.WastedAttempts > 0 {
		rfTone = views.ToneBad
	} else if rf.Refusals > 0 {
		rfTone = views.ToneOK
	}
	out = append(out, views.LabOutcome{N: int(rf.WastedAttempts), Unit: plural(int(rf.WastedAttempts), "wasted attempt", "wasted attempts"), Tone: rfTone,
		Lines: []string{fmt.Sprintf("%d %s answered 400 or 422; %d of them only repeated an answer the client already had.", rf.Refusals, plural(int(rf.Refusals), "request", "requests"), rf.WastedAttempts)}})

	a5 := o.NewKeyAfter500
	out = append(out, views.LabOutcome{N: a5.ChargedTwice, Unit: plural(a5.ChargedTwice, "order charged again after a 500", "orders charged again after a 500"),
		Tone: money(a5.ChargedTwice, a5.Charges),
		Lines: append([]string{fmt.Sprintf("%d %s by order (GET /v1/payments?order_id=…): the safe way to learn whether a 500 had charged.", a5.Reconciliations, plural(int(a5.Reconciliations), "look-up", "look-ups"))},
			list("Charged twice: ", a5.Twice)...)})

	pd := o.PersonalDataKey
	pdTone := views.ToneMute
	if pd.Keys > 0 {
		pdTone = views.ToneBad
	}
	var where []string
	names := make([]string, 0, len(pd.Stored))
	for k := range pd.Stored {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		where = append(where, fmt.Sprintf("%s: %d %s", k, pd.Stored[k], plural(pd.Stored[k], "row", "rows")))
	}
	pdLines := []string{"Stored in the database: " + strings.Join(where, "; ") + "."}
	pdLines = append(pdLines, fmt.Sprintf("Shown on the timeline in %d %s, on every screen in the room, and in every export of it (JSON, CSV).", pd.TimelineEvents, plural(pd.TimelineEvents, "event", "events")))
	out = append(out, views.LabOutcome{N: pd.Keys, Unit: plural(pd.Keys, "key made of personal data", "keys made of personal data"), Tone: pdTone, Lines: pdLines})

	pt := o.PruneTooSoon
	out = append(out, views.LabOutcome{N: pt.ChargedTwice, Unit: plural(pt.ChargedTwice, "order charged again after its key was pruned", "orders charged again after their key was pruned"),
		Tone: money(pt.ChargedTwice, pt.Charges),
		Lines: append([]string{fmt.Sprintf("%d %s pruned by the lab (keys kept %s); %d %s made while the key table was the only memory.",
			pt.Pruned, plural(int(pt.Pruned), "key", "keys"), retentionWords(pt.RetentionSeconds), pt.Charges, plural(pt.Charges, "charge", "charges"))},
			list("Charged again: ", pt.Twice)...)})

	ml := o.MemoryLock
	mlTone := money(ml.ChargedTwice, ml.Charges)
	mlLines := []string{fmt.Sprintf("%d %s made under a lock in memory; %d %s waited for this server's lock on a key another request held.",
		ml.Charges, plural(ml.Charges, "charge", "charges"), ml.LockWaits, plural(int(ml.LockWaits), "request", "requests"))}
	if ml.ChargedTwice > 0 {
		mlLines = append(mlLines, "A key charged twice had its requests on two servers: each took a lock of its own, and neither saw the other's.")
	}
	out = append(out, views.LabOutcome{N: ml.ChargedTwice, Unit: plural(ml.ChargedTwice, "key charged more than once (lock in memory)", "keys charged more than once (lock in memory)"),
		Tone: mlTone, Lines: append(mlLines, list("Charged more than once: ", ml.Twice)...)})
	return out
}

func retentionWords(sec int64) string {
	switch {
	case sec > 0 && sec%3600 == 0:
		return strconv.FormatInt(sec/3600, 10) + " h"
	case sec > 0 && sec%60 == 0:
		return strconv.FormatInt(sec/60, 10) + " min"
	}
	return strconv.FormatInt(sec, 10) + " s"
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// labModeValues tells the panel the values of the modes it offers.
var labModeValues = views.LabModes{Correct: room.LabCorrect, NoKey: room.LabNoKey, CheckThenInsert: room.LabCheckThenInsert,
	CheckThenInsertConstrained: room.LabCheckThenInsertConstrained, KeyTableOnly: room.LabKeyTableOnly, MemoryLock: room.LabMemoryLock}

// labRetentions are the key retentions the panel offers: 0 (the server's
// own) and the lab's two.
var labRetentions = []int64{0, room.LabShortRetentionSeconds, room.LabLongRetentionSeconds}

// labSwitchesView is the settings as the panel shows them.
func (s *Server) labSwitchesView(l room.LabSettings) views.LabSwitches {
	return views.LabSwitches{Mode: l.Server.Mode, Modes: labModeValues, Retentions: labRetentions, CheckGapMS: l.Server.CheckGapMS, RetentionSeconds: l.Server.RetentionSeconds,
		DefaultRetention: retentionWords(int64(s.cfg.Retention.Seconds())),
		NewKeyPerRetry:   l.Client.NewKeyPerRetry, RetryEvery4xx: l.Client.RetryEvery4xx,
		NewKeyAfter500: l.Client.NewKeyAfter500, PersonalDataKey: l.Client.PersonalDataKey}
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

	var lab *views.Lab
	getLab := func() views.Lab {
		if lab == nil {
			v := s.labView(ctx, presenter)
			lab = &v
		}
		return *lab
	}
	if sv, ok := version("s"); ok {
		l := getLab()
		out.V["s"] = l.SettingsV
		if sv != l.SettingsV {
			for _, n := range views.LabMistakeNumbers() {
				if err := add(views.LabControlID(n), views.LabControls(n, l)); err != nil {
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
			for _, n := range views.LabMistakeNumbers() {
				if err := add(views.LabOutcomeID(n), views.LabOutcomeView(n, l.Outcomes[n-1])); err != nil {
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

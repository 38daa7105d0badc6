package workshop

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"paytwice/pay"
	"paytwice/sim"
)

// What the keeper holds: the workshop as the board shows it, and what a
// restarted server needs to know each student again (who they are, their
// gateway's secret path, their endpoint). A student's gateway's books of
// charges are kept apart, in Config.Books, one charge at a time.

// kept is the document saved to the keeper. Several servers sharing one
// store each save into it: a server writes the students it knows, each
// by their secret, and leaves the others' as they are; the settings (on,
// faults, the networks allowed) go with a version, and a server writes them only when its
// presenter changed them, as the next version.
type kept struct {
	Settings int64                 `json:"settings,omitempty"`
	On       bool                  `json:"on"`
	Faults   sim.GatewayBaseFaults `json:"faults"`
	// Allowed are the networks the presenter set (SetAllowed), as they
	// write them; absent until they set any, when every server calls the
	// networks it was started with.
	Allowed  *[]string     `json:"allowed,omitempty"`
	Queued   int           `json:"queued"`
	Students []keptStudent `json:"students"`
	// Removed are the secrets of the students the presenter removed,
	// newest last, at most maxRemembered: no server writes them back.
	Removed []string `json:"removed,omitempty"`
}

// keptStudent is one student, in the order they registered.
type keptStudent struct {
	Who        string    `json:"who"`
	Addr       string    `json:"addr"`
	Name       string    `json:"name"`
	Secret     string    `json:"secret"`
	Endpoint   string    `json:"endpoint"`
	Registered time.Time `json:"registered"`
	Hidden     bool      `json:"hidden,omitempty"`
	Run        Run       `json:"run"`
	Place      int       `json:"place,omitempty"`
	Charges    int       `json:"charges"`
	Pruned     int64     `json:"pruned,omitempty"`
}

// Interrupted runs' messages.
const (
	interruptedRunning = "The server stopped during the run: its cases so far are shown, the rest were never tried; ask for a run again."
	interruptedQueued  = "The server stopped before this run started: ask for a run again."
)

// changedLocked notes a change for the saver; w.mu is held.
func (w *Workshop) changedLocked() {
	w.changes++
	if w.cfg.Changed != nil {
		w.cfg.Changed()
	}
	select {
	case w.dirty <- struct{}{}:
	default: // a save is due already, and will take this change too
	}
}

// keep saves the changes until ctx ends, at most one save per
// Config.SaveEvery, then, once the workers have stopped (their runs shown
// as interrupted), the last one.
// While the kept workshop is unread (RestoreLater), it reads it again
// every Config.ReadAgainEvery.
func (w *Workshop) keep(ctx context.Context) {
	wait := time.NewTimer(0)
	defer wait.Stop()
	var again <-chan time.Time
	w.mu.Lock()
	if w.unread {
		t := time.NewTicker(w.cfg.ReadAgainEvery)
		defer t.Stop()
		again = t.C
	}
	w.mu.Unlock()
	for {
		select {
		case <-wait.C:
		case <-again:
			again = w.readAgain(ctx, again)
			continue
		case <-w.recheck:
			w.readSettings(ctx)
			continue
		case <-ctx.Done():
			w.saveLast(ctx)
			return
		}
		select {
		case <-w.dirty:
			if w.save(ctx) {
				wait.Reset(w.cfg.SaveEvery)
				continue
			}
			// The store refused the save (a lock it waited too long
			// for, a lost connection): the change is still to keep,
			// and no other change may come to ask for it again.
			select {
			case w.dirty <- struct{}{}:
			default:
			}
			wait.Reset(min(w.cfg.SaveEvery, saveRetryAfter))
		case <-again:
			again = w.readAgain(ctx, again)
			wait.Reset(0)
		case <-w.recheck:
			w.readSettings(ctx)
			wait.Reset(0)
		case <-ctx.Done():
			w.saveLast(ctx)
			return
		}
	}
}

// RestoreLater says Restore could not read the kept workshop: the saver
// reads it again until it can, and the workshop adds the kept students
// to those registered meanwhile. Call it before Start.
func (w *Workshop) RestoreLater() {
	w.mu.Lock()
	w.unread = true
	w.mu.Unlock()
}

// readAgain tries Restore once more, bounded by Config.ReadAgainEvery; it
// returns tick while the workshop is still unread, nil once read.
func (w *Workshop) readAgain(ctx context.Context, tick <-chan time.Time) <-chan time.Time {
	read, cancel := context.WithTimeout(ctx, w.cfg.ReadAgainEvery)
	err := w.Restore(read)
	cancel()
	if err != nil {
		w.cfg.Logf("%v: reading it again in %v", err, w.cfg.ReadAgainEvery)
		return tick
	}
	w.cfg.Logf("workshop: the kept scoreboard is read")
	return nil
}

func (w *Workshop) saveLast(ctx context.Context) {
	w.workers.Wait()
	last, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	w.save(last)
	cancel()
}

// saveRetryAfter is the longest wait before a save the store refused is
// tried again.
const saveRetryAfter = time.Second

// save merges the workshop into the keeper's document when it changed
// since the last save: a server that only read the kept workshop never
// writes it. The students of other servers sharing the store stay as
// they are, and settings a newer version of which is kept are taken
// from there instead of written over. It reports false when the keeper
// refused the save.
func (w *Workshop) save(ctx context.Context) bool {
	w.mu.Lock()
	if w.changes == w.saved {
		w.mu.Unlock()
		return true
	}
	at := w.changes
	w.mu.Unlock()
	var announce bool
	var version int64
	err := w.cfg.Keeper.UpdateWorkshop(ctx, func(old []byte) ([]byte, error) {
		var was kept
		if len(old) > 0 {
			if err := json.Unmarshal(old, &was); err != nil {
				return nil, fmt.Errorf("reading the kept scoreboard: %w", err)
			}
		}
		w.mu.Lock()
		announce = announce || w.settingsChanged
		doc := w.mergeLocked(was)
		version = doc.Settings
		w.mu.Unlock()
		return json.Marshal(doc)
	})
	if err != nil {
		w.cfg.Logf("workshop: keeping the scoreboard: %v", err)
		return false
	}
	w.mu.Lock()
	w.saved = max(w.saved, at)
	w.mu.Unlock()
	if w.cfg.Saved != nil {
		w.cfg.Saved()
	}
	if announce && w.cfg.Announce != nil {
		if err := w.cfg.Announce(ctx, version); err != nil {
			// The others read the settings at their next save or board.
			w.cfg.Logf("workshop: telling the other servers of the new settings: %v", err)
		}
	}
	return true
}

// mergeLocked is was with this server's part written into it; w.mu is
// held.
func (w *Workshop) mergeLocked(was kept) kept {
	w.forgetRemovedLocked(was.Removed)
	doc := w.keptLocked()
	switch {
	case w.settingsChanged:
		// Written as the next version; should the write fail, the
		// next save writes them again.
		w.settingsChanged = false
		doc.Settings = max(was.Settings, w.settings) + 1
		w.settings = doc.Settings
	case was.Settings > w.settings:
		w.adoptLocked(was)
		doc.Settings, doc.On, doc.Faults, doc.Allowed = was.Settings, was.On, was.Faults, was.Allowed
	default:
		doc.Settings = w.settings
	}
	if doc.Allowed == nil && was.Allowed != nil {
		// Networks another server's presenter set, this one never did.
		w.takeAllowedLocked(was.Allowed)
		doc.Allowed = was.Allowed
	}
	mine := make(map[string]*keptStudent, len(doc.Students))
	for i := range doc.Students {
		mine[doc.Students[i].Secret] = &doc.Students[i]
	}
	students := make([]keptStudent, 0, len(was.Students)+len(doc.Students))
	for _, k := range was.Students {
		if m := mine[k.Secret]; m != nil {
			// A gateway's charges only grow, and each server counts
			// those taken through it: a count another server kept
			// higher is not written back lower (the first server saving
			// its older count after the second kept the charge taken
			// through it, every later save of the second an hour away).
			m.Charges, m.Pruned = max(m.Charges, k.Charges), max(m.Pruned, k.Pruned)
			continue
		}
		if !w.removedLocked(k.Secret, was.Removed) {
			students = append(students, k)
		}
	}
	doc.Students = append(students, doc.Students...)
	doc.Removed = was.Removed
	for _, secret := range w.remembered {
		if !slices.Contains(doc.Removed, secret) {
			doc.Removed = append(doc.Removed, secret)
		}
	}
	if over := len(doc.Removed) - maxRemembered; over > 0 {
		doc.Removed = doc.Removed[over:]
	}
	return doc
}

// keptLocked is this server's workshop as a document: its settings and
// the students it knows. w.mu is held.
func (w *Workshop) keptLocked() kept {
	doc := kept{On: w.on, Faults: w.faults, Queued: len(w.queue), Students: make([]keptStudent, 0, len(w.order))}
	if w.allowedSet {
		nets := make([]string, 0)
		for _, a := range w.cfg.Guard.Allowed() {
			nets = append(nets, a.String())
		}
		doc.Allowed = &nets
	}
	for _, st := range w.order {
		row := w.rowLocked(st)
		doc.Students = append(doc.Students, keptStudent{Who: st.who, Addr: st.addr, Name: st.name, Secret: st.secret,
			Endpoint: st.endpoint.String(), Registered: st.registered, Hidden: st.hidden, Run: st.run, Place: row.Place, Charges: row.Charges, Pruned: row.Pruned})
	}
	return doc
}

// adoptLocked takes the kept settings, newer than this server's: another
// server's presenter changed them. w.mu is held.
func (w *Workshop) adoptLocked(doc kept) {
	if doc.Settings <= w.settings || w.settingsChanged {
		return
	}
	w.settings, w.on, w.faults = doc.Settings, doc.On, doc.Faults
	for _, st := range w.students {
		st.gw.SetBaseFaults(doc.Faults)
	}
	w.takeAllowedLocked(doc.Allowed)
}

// takeAllowedLocked has the guard call the networks the presenter set, as
// kept; nil (never set) leaves this server's own. w.mu is held.
func (w *Workshop) takeAllowedLocked(nets *[]string) {
	if nets == nil {
		return
	}
	allowed, err := ParseAllowed(strings.Join(*nets, ","))
	if err != nil {
		w.cfg.Logf("workshop: the kept networks allowed are unreadable, left as they were: %v", err)
		return
	}
	w.cfg.Guard.SetAllowed(allowed)
	w.allowedSet = true
}

// Restore reads the kept workshop, as a restarted server does before it
// serves: the students, their rows and secret gateway paths, the hidden
// rows, the faults, open or closed. A run the server stopped during, or
// before it started, is shown as interrupted, never as a result it did
// not reach; the change is saved.
func (w *Workshop) Restore(ctx context.Context) error {
	if w.cfg.Keeper == nil {
		return nil
	}
	doc, err := w.loadKept(ctx)
	if err != nil {
		return err
	}
	books, err := w.readBooks(ctx, doc)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.unread = false
	if !w.settingsChanged && doc.Settings >= w.settings {
		w.on, w.faults, w.settings = doc.On, doc.Faults, doc.Settings
		for _, st := range w.students {
			st.gw.SetBaseFaults(w.faults)
		}
		w.takeAllowedLocked(doc.Allowed)
	}
	interrupted := false
	for _, k := range doc.Students {
		if w.removedLocked(k.Secret, doc.Removed) {
			continue
		}
		u, err := ParseEndpoint(k.Endpoint)
		if w.students[k.Who] != nil && w.students[k.Who].secret == k.Secret {
			continue // registered here before the kept workshop could be read
		}
		if err != nil || k.Who == "" || k.Secret == "" || w.students[k.Who] != nil || w.bySecret[k.Secret] != nil {
			w.cfg.Logf("workshop: the kept student %q is unreadable, left out", k.Name)
			continue
		}
		kb := books[k.Secret]
		st := &student{who: k.Who, addr: k.Addr, name: k.Name, secret: k.Secret, endpoint: u,
			registered: k.Registered, run: k.Run, hidden: k.Hidden}
		st.gw, st.fence = w.newGateway(k.Secret, kb.held, kb.tally)
		if w.cfg.Books == nil {
			st.chargesBefore = k.Charges
		}
		switch st.run.State {
		case Running:
			st.run.State, st.run.Message, interrupted = Interrupted, interruptedRunning, true
		case Queued:
			st.run.State, st.run.Message, interrupted = Interrupted, interruptedQueued, true
		}
		w.students[st.who], w.bySecret[st.secret] = st, st
		w.perAddr[st.addr]++
		w.order = append(w.order, st)
	}
	if interrupted {
		w.changedLocked()
	}
	return nil
}

func (w *Workshop) loadKept(ctx context.Context) (kept, error) {
	b, err := w.cfg.Keeper.LoadWorkshop(ctx)
	if err != nil {
		return kept{}, fmt.Errorf("workshop: reading the kept scoreboard: %w", err)
	}
	var doc kept
	if err := json.Unmarshal(b, &doc); err != nil {
		return kept{}, fmt.Errorf("workshop: reading the kept scoreboard: %w", err)
	}
	return doc, nil
}

// KeptScoreboard is the scoreboard as the keeper holds it: what every
// server's board shows when several servers share one store, whichever
// of them runs the workshop. Its runs lag the running server by its last
// save; its gateway counts are what the books hold as it is read.
func (w *Workshop) KeptScoreboard(ctx context.Context) (Scoreboard, error) {
	if w.cfg.Keeper == nil {
		return w.Scoreboard(), nil
	}
	doc, err := w.loadKept(ctx)
	if err != nil {
		return Scoreboard{}, err
	}
	w.mu.Lock()
	w.adoptLocked(doc)
	w.forgetRemovedLocked(doc.Removed)
	var gone []string
	for _, k := range doc.Students {
		if w.removedLocked(k.Secret, doc.Removed) {
			gone = append(gone, k.Secret) // removed here, not saved yet
		}
	}
	w.mu.Unlock()
	// The counts come from the books themselves, read now (or within
	// talliesFresh), not from the last save: a charge taken through any
	// server shows on every board at its next fetch. Where the books do
	// not answer, the rows are the kept ones all the same, their counts
	// marked not known rather than guessed.
	var tallies map[string]pay.WorkshopTally
	unknown := false
	if w.cfg.Books != nil {
		if tallies, err = w.readTallies(ctx); err != nil {
			unknown = true
		}
	}
	b := Scoreboard{On: doc.On, Faults: doc.Faults, Allowed: w.cfg.Guard.Allowed(), Queued: doc.Queued, Queue: w.cfg.Queue}
	if unknown {
		b.ChargesErr = fmt.Errorf("workshop: counting the gateways' books: %w", err)
	}
	for _, k := range doc.Students {
		if slices.Contains(gone, k.Secret) {
			continue
		}
		if k.Hidden {
			b.Hidden = append(b.Hidden, k.Name)
			continue
		}
		row := Row{Name: k.Name, Endpoint: k.Endpoint, Run: k.Run, Place: k.Place, Charges: k.Charges, Pruned: k.Pruned}
		switch {
		case unknown:
			row.Charges, row.Pruned, row.ChargesUnknown = 0, 0, true
		case tallies != nil:
			t := tallies[k.Secret]
			row.Charges, row.Pruned = t.Held+int(t.Pruned), t.Pruned
		}
		b.Rows = append(b.Rows, row)
	}
	return b, nil
}

// SettingsChannel is the channel on which servers sharing a keeper
// announce a new version of the settings (Config.Announce), as its
// decimal number.
const SettingsChannel = "paytwice_workshop"

// SettingsListened runs each time this server (re)starts listening on
// SettingsChannel: settings announced while it was not are read now.
func (w *Workshop) SettingsListened() { w.wakeRecheck() }

// SettingsNotified takes an announcement heard on SettingsChannel: the
// saver reads settings newer than this server's from the keeper at once,
// and its gateways take the new faults. It never blocks.
func (w *Workshop) SettingsNotified(payload string) {
	v, err := strconv.ParseInt(payload, 10, 64)
	w.mu.Lock()
	newer := err != nil || v == removalAnnounced || v > w.settings
	w.mu.Unlock()
	if newer {
		w.wakeRecheck()
	}
}

func (w *Workshop) wakeRecheck() {
	select {
	case w.recheck <- struct{}{}:
	default: // a read is due already
	}
}

// readSettings reads the kept settings and takes them when they are newer
// than this server's, bounded by Config.ReadAgainEvery.
func (w *Workshop) readSettings(ctx context.Context) {
	read, cancel := context.WithTimeout(ctx, w.cfg.ReadAgainEvery)
	doc, err := w.loadKept(read)
	cancel()
	if err != nil {
		w.cfg.Logf("%v: the settings announced are read at the next save", err)
		return
	}
	w.mu.Lock()
	w.adoptLocked(doc)
	w.forgetRemovedLocked(doc.Removed)
	w.mu.Unlock()
}

package web

import (
	"context"
	"sync"
	"sync/atomic"

	"paytwice/pay"
	"paytwice/web/live"
)

// personalKeys are the keys made of personal data the lab saw: a real
// server has no way to refuse one, so the lab accepts it, says so on the
// timeline, and counts where such keys end up stored.
type personalKeys struct {
	timeline personalTimeline
	// places are the databases that keep keys: the payments store, and
	// the gateway's ledger when it is a database of its own.
	places []keyScanner

	requests atomic.Int64 // requests whose key looked like personal data
	mu       sync.Mutex
	flagged  map[string]string // scope|key → what kind of personal data

	// elsewhere says another server flagged a key of personal data since
	// the last reset, and stored that the last scan found some in the
	// tables: either puts such keys in play for the other servers' writes
	// (otherServersWrote).
	elsewhere atomic.Bool
	stored    atomic.Bool
	// tablesGen moves when the tables changed in a way this server's own
	// writes do not tell (mistakesLab.tablesChanged).
	tablesGen atomic.Uint64
	scan      personalScan
}

// personalScan is the last scan for keys made of personal data, made at
// event seq while the tables were at version gen.
type personalScan struct {
	mu  sync.Mutex
	out LabPersonalOutcome
	seq uint64
	gen uint64
}

// personalTimeline is what the scan needs of the live hub: where to flag
// a key, and the events the timeline holds.
type personalTimeline interface {
	timeline
	Recent(n int) []*live.Entry
}

// keyScanner is a database that keeps keys, as the scan reads it.
type keyScanner interface {
	LabScanKeys(ctx context.Context, fn func(where, key string)) error
}

func newPersonalKeys(tl personalTimeline, places []keyScanner) *personalKeys {
	return &personalKeys{timeline: tl, places: places, flagged: map[string]string{}}
}

// flag accepts a key that looks like personal data (a real server has no
// way to refuse it) and says so on the timeline, once per key: the event
// itself carries the key onto every screen, which is the point.
func (p *personalKeys) flag(scope, key, kind string) {
	p.requests.Add(1)
	id := scope + "|" + key
	p.mu.Lock()
	_, seen := p.flagged[id]
	if !seen && len(p.flagged) < labMaxTracked {
		p.flagged[id] = kind
	}
	p.mu.Unlock()
	if seen {
		return
	}
	p.timeline.Publish(live.Event{Kind: labKind, Scope: scope, Key: key,
		Message: "flagged: this key looks like " + kind + ". It is accepted, and now stored in the key table, on the charge, in the gateway's ledger, on this timeline and in its export."})
}

// clear forgets the keys flagged here and elsewhere, for a reset.
func (p *personalKeys) clear() {
	p.requests.Store(0)
	p.mu.Lock()
	clear(p.flagged)
	p.mu.Unlock()
	p.elsewhere.Store(false)
}

// otherServersWrote moves tablesGen for the writes of one notification of
// other servers' events only when the tables may hold more or fewer keys
// of personal data than the last scan found: keys were removed, events
// were missed, or such keys are in play (a server flagged one, or the
// last scan found some). Without that, every payment of another server
// made the next page view scan the tables, which reads three of them
// whole.
func (p *personalKeys) otherServersWrote(batch []live.Entry) {
	again := p.requests.Load() > 0 || p.elsewhere.Load() || p.stored.Load()
	for i := range batch {
		switch e := &batch[i]; {
		case e.Kind == labKind && e.Key != "" && pay.PersonalData(e.Key) != "":
			p.elsewhere.Store(true)
			again = true
		case e.Kind == live.Pruned, e.Kind == live.Gap, e.Kind == live.Reset:
			again = true
		}
	}
	if again {
		p.tablesGen.Add(1)
	}
}

// outcomeCached scans for keys made of personal data only while such keys
// are in play: once per event after a request on this server carried
// one, else once after each change mistakesLab.tablesChanged (or, for
// other servers' writes, otherServersWrote) reports: no other write can
// store such a key.
func (p *personalKeys) outcomeCached(ctx context.Context, seq uint64) (LabPersonalOutcome, error) {
	p.scan.mu.Lock()
	defer p.scan.mu.Unlock()
	gen := p.tablesGen.Load() + 1 // 0: never scanned
	if p.scan.gen == gen && (p.requests.Load() == 0 || p.scan.seq == seq) {
		return p.scan.out, nil
	}
	o, err := p.outcome(ctx)
	if err != nil {
		return o, err
	}
	p.scan.out, p.scan.seq, p.scan.gen = o, seq, gen
	p.stored.Store(o.Stored[pay.WhereKeyTable]+o.Stored[pay.WhereCharges]+o.Stored[pay.WhereGateway] > 0)
	return o, nil
}

// outcome finds keys made of personal data wherever keys are kept: the
// tables of both files, and the events the timeline holds.
func (p *personalKeys) outcome(ctx context.Context) (LabPersonalOutcome, error) {
	o := LabPersonalOutcome{Requests: p.requests.Load(), Stored: map[string]int{
		pay.WhereKeyTable: 0, pay.WhereCharges: 0, pay.WhereGateway: 0}}
	p.mu.Lock()
	o.Keys = len(p.flagged)
	p.mu.Unlock()
	count := func(where, key string) {
		if pay.PersonalData(key) != "" {
			o.Stored[where]++
		}
	}
	for _, db := range p.places {
		if err := db.LabScanKeys(ctx, count); err != nil {
			return o, err
		}
	}
	for _, e := range p.timeline.Recent(live.DefaultSize) {
		if e.Key != "" && pay.PersonalData(e.Key) != "" {
			o.TimelineEvents++
		}
	}
	return o, nil
}

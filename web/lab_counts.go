package web

import (
	"hash/maphash"
	"slices"
	"sort"
	"strings"

	"paytwice/pay"
)

// tallyKind is what a charge counts for.
type tallyKind int

const (
	tallyNoKey      tallyKind = iota // the "no key" mode's, per order
	tallyKeyOnly                     // the key table as the only memory, per order
	tallyGuarded                     // the real protocol's, per order
	tallyCheckFirst                  // check-then-insert's unguarded table, per key
	tallyMemoryLock                  // the lock in memory's unguarded table, per key
	tallyKinds
)

// tallyGroup is one order's (or one key's) charges.
type tallyGroup struct {
	first    int64 // Unix nanoseconds of its first charge: lists are oldest first
	charges  int32
	saved500 bool   // one of its keys saved a 500
	name     string // how the lists name it; set once it has two charges
	// charges' ids (hashed), the real protocol's groups only: a charge
	// read again with its order from the store is not counted twice.
	ids []uint64
}

// guardedSingle is a real-protocol order charged once. Nothing shows it:
// it is kept only in case the order is charged again (under a new key),
// and only for the newest orders (labCounts.singleLimit).
type guardedSingle struct {
	first    int64
	charge   uint64 // its charge's id, hashed
	saved500 bool
}

// labGuardedWindow is how many real-protocol orders charged once the
// counts keep. Every payment is such an order: keeping them all grew the
// server's heap by about 0.3 KB a payment without bound. An order charged
// again after falling out of the window is read back from the store.
const labGuardedWindow = 100_000

// droppedOrders remembers, in a Bloom filter, the real protocol's orders
// dropped from the window. An order it does not hold was never dropped,
// so a charge of it is counted without reading its order back from the
// store: without it, once one order had been dropped, every new payment
// read its order's charges before its 201. It holds no false negative; a
// false positive costs only that read. 1 MB, allocated at the first drop:
// one new order in 3,000 is read in vain after 200,000 drops, one in 37
// after a million, one in four after three million, and past ten million
// nearly every one, which is what every new order cost before the filter;
// a rebuild of the counts starts it afresh.
type droppedOrders struct {
	bits []uint64
}

const (
	droppedOrderBits   = 1 << 23 // a power of two: an index is a mask
	droppedOrderHashes = 3
)

// indexes are an order's bits, by double hashing of its 64-bit sum.
func (d *droppedOrders) indexes(sum uint64) [droppedOrderHashes]uint32 {
	h1, h2 := uint32(sum), uint32(sum>>32)|1
	var ix [droppedOrderHashes]uint32
	for i := range ix {
		ix[i] = (h1 + uint32(i)*h2) & (droppedOrderBits - 1)
	}
	return ix
}

func (d *droppedOrders) add(sum uint64) {
	if d.bits == nil {
		d.bits = make([]uint64, droppedOrderBits/64)
	}
	for _, i := range d.indexes(sum) {
		d.bits[i/64] |= 1 << (i % 64)
	}
}

// mayHold reports whether the order may have been dropped.
func (d *droppedOrders) mayHold(sum uint64) bool {
	if d.bits == nil {
		return false
	}
	for _, i := range d.indexes(sum) {
		if d.bits[i/64]&(1<<(i%64)) == 0 {
			return false
		}
	}
	return true
}

// any reports whether an order was dropped.
func (d *droppedOrders) any() bool { return d.bits != nil }

// labCounts is one complete count of the charge tables.
type labCounts struct {
	groups       [tallyKinds]map[uint64]tallyGroup
	many         [tallyKinds]map[uint64]struct{} // the groups with two charges or more
	charges      [tallyKinds]int
	looseKeyRows int
	// singles are the real protocol's orders charged once, window their
	// hashes in the order they came (a ring once full); dropped the
	// orders dropped from it: an order not in memory that dropped may
	// hold may have been charged before.
	singles     map[uint64]guardedSingle
	window      []uint64
	windowNext  int
	singleLimit int // 0: no bound (while a rebuild reads the tables)
	dropped     droppedOrders
	// version moves with every row added; report is the outcomes drawn
	// from the counts at reportV, shared until they change.
	version, reportV uint64
	report           *LabOutcomes
}

func newLabCounts() *labCounts {
	c := &labCounts{version: 1, singles: map[uint64]guardedSingle{}}
	for k := range c.groups {
		c.groups[k] = map[uint64]tallyGroup{}
		c.many[k] = map[uint64]struct{}{}
	}
	return c
}

// classify says what a row counts for, the id it is grouped by and how
// the lists name its group; ok is false for rows counted apart or not at all.
func classify(r pay.LabRow) (kind tallyKind, id, name string, ok bool) {
	id, name = r.OrderID, r.OrderID
	switch r.Table {
	case pay.LabLooseCharges:
		kind, id = tallyCheckFirst, r.Key
		key, memoryLock := strings.CutPrefix(r.Key, memoryLockPrefix)
		if memoryLock {
			kind = tallyMemoryLock
		}
		name = pay.Truncate(key, 40) + " (" + r.OrderID + ")"
	case pay.LabCharges:
		switch {
		case strings.HasPrefix(r.Key, pay.LabKeyPrefix+"no-key "):
			kind = tallyNoKey
		case strings.HasPrefix(r.Key, pay.LabKeyPrefix+"key-table-only "):
			kind = tallyKeyOnly
		case strings.HasPrefix(r.Key, pay.LabKeyPrefix):
			return 0, "", "", false // no mistake files charges there
		default:
			kind = tallyGuarded
		}
	default:
		return 0, "", "", false
	}
	return kind, id, name, true
}

// groupSum finds a group: a 64-bit hash of scope and order (or key), so
// that the maps hold no strings for the many orders charged once.
func groupSum(seed maphash.Seed, scope, id string) uint64 {
	var h maphash.Hash
	h.SetSeed(seed)
	h.WriteString(scope)
	h.WriteByte(0)
	h.WriteString(id)
	return h.Sum64()
}

// add counts one row, as LabMeasure groups it. It reports false when the
// row cannot be placed: a real-protocol charge of an order not in memory
// after older orders were dropped (see addGuarded).
func (c *labCounts) add(seed maphash.Seed, r pay.LabRow) bool {
	return c.addLooked(seed, r, nil, false)
}

// addLooked is add with, when looked, every charge of the row's order as
// the store held them after the row was written.
func (c *labCounts) addLooked(seed maphash.Seed, r pay.LabRow, order []pay.LabRow, looked bool) bool {
	if r.Table == pay.LabLooseKeys {
		if !strings.HasPrefix(r.Key, pay.LabKeyPrefix) {
			c.looseKeyRows++
			c.version++
		}
		return true
	}
	kind, id, name, ok := classify(r)
	if !ok {
		return true
	}
	sum := groupSum(seed, r.Scope, id)
	if kind == tallyGuarded {
		return c.addGuarded(seed, sum, r, name, order, looked)
	}
	g := c.groups[kind][sum]
	g.count(r)
	if g.charges == 2 {
		g.name = name
		c.many[kind][sum] = struct{}{}
	}
	c.groups[kind][sum] = g
	c.charges[kind]++
	c.version++
	return true
}

// count adds one charge to the group.
func (g *tallyGroup) count(r pay.LabRow) {
	if g.charges == 0 || r.CreatedAt.UnixNano() < g.first {
		g.first = r.CreatedAt.UnixNano()
	}
	g.charges++
	g.saved500 = g.saved500 || r.Saved500
}

func chargeSum(id string) uint64 { return maphash.String(chargeSeed, id) }

// chargeSeed hashes charge ids; any fixed seed will do within a process.
var chargeSeed = maphash.MakeSeed()

// addGuarded counts a real-protocol charge. Orders charged twice or more
// are kept (the lab lists them); orders charged once only within the
// window. An order found in neither that may have been dropped from the
// window (c.dropped) can be placed only by its charges read from the
// store (order, looked), and without them the row is not counted (false).
func (c *labCounts) addGuarded(seed maphash.Seed, sum uint64, r pay.LabRow, name string, order []pay.LabRow, looked bool) bool {
	kind := tallyGuarded
	charge := chargeSum(r.ID)
	if g, ok := c.groups[kind][sum]; ok {
		if slices.Contains(g.ids, charge) {
			return true // already counted with its order, read from the store
		}
		g.count(r)
		g.ids = append(g.ids, charge)
		c.groups[kind][sum] = g
		c.charges[kind]++
		c.version++
		return true
	}
	if s, ok := c.singles[sum]; ok {
		if s.charge == charge {
			return true
		}
		g := tallyGroup{first: s.first, charges: 1, saved500: s.saved500, name: name, ids: []uint64{s.charge, charge}}
		g.count(r)
		delete(c.singles, sum)
		c.groups[kind][sum], c.many[kind][sum] = g, struct{}{}
		c.charges[kind]++
		c.version++
		return true
	}
	if !looked && c.dropped.mayHold(sum) {
		return false
	}
	g := tallyGroup{name: name}
	for _, o := range append(order, r) {
		if k, id, _, ok := classify(o); !ok || k != kind || groupSum(seed, o.Scope, id) != sum ||
			slices.Contains(g.ids, chargeSum(o.ID)) {
			continue
		}
		g.count(o)
		g.ids = append(g.ids, chargeSum(o.ID))
	}
	c.charges[kind] += int(g.charges)
	c.version++
	if g.charges >= 2 {
		c.groups[kind][sum], c.many[kind][sum] = g, struct{}{}
		return true
	}
	c.keepSingle(sum, guardedSingle{first: g.first, charge: charge, saved500: g.saved500})
	return true
}

// keepSingle keeps an order charged once, dropping the oldest kept once
// the window is full.
func (c *labCounts) keepSingle(sum uint64, s guardedSingle) {
	c.singles[sum] = s
	if c.singleLimit <= 0 {
		return
	}
	if len(c.window) < c.singleLimit {
		c.window = append(c.window, sum)
		return
	}
	// A slot whose order was charged again since holds no single.
	if old := c.window[c.windowNext]; old != sum {
		if _, kept := c.singles[old]; kept {
			delete(c.singles, old)
			c.dropped.add(old)
		}
	}
	c.window[c.windowNext] = sum
	c.windowNext = (c.windowNext + 1) % c.singleLimit
}

// bound keeps at most limit orders charged once, the newest: a rebuild
// reads the tables unbounded (their rows come in no useful order), then
// drops the oldest.
func (c *labCounts) bound(limit int) {
	type kept struct {
		sum uint64
		s   guardedSingle
	}
	all := make([]kept, 0, len(c.singles))
	for sum, s := range c.singles {
		all = append(all, kept{sum, s})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].s.first < all[j].s.first })
	if len(all) > limit {
		for _, k := range all[:len(all)-limit] {
			delete(c.singles, k.sum)
			c.dropped.add(k.sum)
		}
		all = all[len(all)-limit:]
	}
	c.singleLimit, c.window, c.windowNext = limit, make([]uint64, 0, limit), 0
	for _, k := range all {
		c.window = append(c.window, k.sum)
	}
	if len(c.window) == limit {
		c.windowNext = 0
	}
}

// mayBeForgotten reports whether a real-protocol charge's order may have
// been dropped from memory: counting the row then needs its order's
// charges from the store.
func (c *labCounts) mayBeForgotten(seed maphash.Seed, r pay.LabRow) bool {
	if !c.dropped.any() {
		return false
	}
	kind, id, _, ok := classify(r)
	if !ok || kind != tallyGuarded {
		return false
	}
	sum := groupSum(seed, r.Scope, id)
	_, single := c.singles[sum]
	_, many := c.groups[kind][sum]
	return !single && !many && c.dropped.mayHold(sum)
}

// outcome is chargeOutcome for one kind: every charge of the kind when
// keep is nil, else only the groups charged more than once that keep
// accepts (the real protocol's orders paid under several keys).
func (c *labCounts) outcome(kind tallyKind, keep func(tallyGroup) bool) LabChargeOutcome {
	o := LabChargeOutcome{Twice: []string{}}
	if keep == nil {
		o.Charges = c.charges[kind]
	}
	many := make([]tallyGroup, 0, len(c.many[kind]))
	for sum := range c.many[kind] {
		g := c.groups[kind][sum]
		if keep != nil && !keep(g) {
			continue
		}
		many = append(many, g)
		if keep != nil {
			o.Charges += int(g.charges)
		}
		o.ChargedTwice++
		o.ExtraCharges += int(g.charges) - 1
	}
	sort.Slice(many, func(i, j int) bool {
		if many[i].first != many[j].first {
			return many[i].first < many[j].first
		}
		return many[i].name < many[j].name
	})
	for i, g := range many {
		if i == labMaxListed {
			break
		}
		o.Twice = append(o.Twice, g.name)
	}
	return o
}

// outcomes is the charge counts as GET /api/lab/outcomes reports them,
// drawn once per change of the counts: the lists are sorted then, not at
// every question.
func (c *labCounts) outcomes() LabOutcomes {
	if c.report != nil && c.reportV == c.version {
		return *c.report
	}
	var o LabOutcomes
	o.NoKey = c.outcome(tallyNoKey, nil)
	o.CheckThenInsert = LabRaceOutcome{ChargeOutcome: c.outcome(tallyCheckFirst, nil), KeyRows: c.looseKeyRows}
	o.MemoryLock = LabLockOutcome{ChargeOutcome: c.outcome(tallyMemoryLock, nil)}
	o.NewKeyPerRetry = c.outcome(tallyGuarded, func(g tallyGroup) bool { return !g.saved500 })
	o.NewKeyAfter500 = LabReconcileOutcome{ChargeOutcome: c.outcome(tallyGuarded, func(g tallyGroup) bool { return g.saved500 })}
	o.PruneTooSoon = LabPruneOutcome{ChargeOutcome: c.outcome(tallyKeyOnly, nil)}
	c.report, c.reportV = &o, c.version
	return o
}

// labMaxListed bounds each list of what was charged more than once.
const labMaxListed = 500

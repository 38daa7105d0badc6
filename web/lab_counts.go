package web

import (
	"hash/maphash"
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
}

// labCounts is one complete count of the charge tables.
type labCounts struct {
	groups       [tallyKinds]map[uint64]tallyGroup
	many         [tallyKinds]map[uint64]struct{} // the groups with two charges or more
	charges      [tallyKinds]int
	looseKeyRows int
	// version moves with every row added; report is the outcomes drawn
	// from the counts at reportV, shared until they change.
	version, reportV uint64
	report           *LabOutcomes
}

func newLabCounts() *labCounts {
	c := &labCounts{version: 1}
	for k := range c.groups {
		c.groups[k] = map[uint64]tallyGroup{}
		c.many[k] = map[uint64]struct{}{}
	}
	return c
}

// add counts one row, as LabMeasure groups it.
func (c *labCounts) add(seed maphash.Seed, r pay.LabRow) {
	var kind tallyKind
	id, name := r.OrderID, r.OrderID
	switch r.Table {
	case pay.LabLooseKeys:
		if !strings.HasPrefix(r.Key, pay.LabKeyPrefix) {
			c.looseKeyRows++
			c.version++
		}
		return
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
			return // no mistake files charges there
		default:
			kind = tallyGuarded
		}
	default:
		return
	}
	// Groups are found by a 64-bit hash of scope and order (or key): the
	// map then holds no strings for the many orders charged once.
	var h maphash.Hash
	h.SetSeed(seed)
	h.WriteString(r.Scope)
	h.WriteByte(0)
	h.WriteString(id)
	sum := h.Sum64()
	g := c.groups[kind][sum]
	if g.charges == 0 || r.CreatedAt.UnixNano() < g.first {
		g.first = r.CreatedAt.UnixNano()
	}
	g.charges++
	g.saved500 = g.saved500 || r.Saved500
	if g.charges == 2 {
		g.name = name
		c.many[kind][sum] = struct{}{}
	}
	c.groups[kind][sum] = g
	c.charges[kind]++
	c.version++
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

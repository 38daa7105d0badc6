package sim

import (
	"math"
	"math/bits"
	"math/rand/v2"
	"time"
)

// The counted herd: the same model as herdSim (see HerdConfig), computed by
// counting clients instead of following each one.
//
// Time is cut into steps of herdStep. For every step the calendar holds how
// many clients' reads reach the server in it, by class: what a client's next
// wait depends on, its number of failures so far. (Decorrelated's next wait
// depends on its previous one, a number, not a count: decorrelatedHerd keeps
// each read's previous wait instead.) Within a step a read's moment is
// uniform, which is what the steps are small enough for.
//
// The server's rule makes the rest countable. After a success at s, the
// next success is the earliest write among the reads that came after s; a
// read's write follows it by two hops, D. So each step needs only the
// smallest of its R writes, drawn at once from the distribution of the
// minimum of R (inverting P(min > x) = (1-F(x))^R), not R draws. Every
// other read fails: its client comes back after two more hops and its
// wait, and where those clients go is drawn as counts per step (a
// multinomial, as sequential binomials), client by client when they are
// few, or into a pool (widePool) when their waits are spread wide or, for
// the fixed waits of None and Exponential, while more than poolNarrowAbove
// clients are left. The work of a run is the number of reads, as every
// read is followed by one write.
//
// What it approximates: a read's moment within its step (uniform), the
// four hops of a failed client as one Normal(40 ms, 4 ms) (the sum of four
// |Normal(10 ms, 2 ms)|, whose folded part is under 1e-6) cut at ±4.5
// sigma, binomial counts with a mean of 20 or more drawn from the normal
// approximation, and the pools (see widePool and poolNarrowAbove).
// TestCountedHerdMatchesEvents measures the result against the event model.
const (
	// herdStep is the width of one time step of the counted herd.
	herdStep = time.Millisecond
	// MaxEventHerdClients is the largest herd computed event by event;
	// larger herds are counted (countedHerd).
	MaxEventHerdClients = 1000
	// MaxCountedHerdCap bounds the backoff cap of a counted herd: its
	// calendar spans one cap.
	MaxCountedHerdCap = time.Minute
)

// hop figures in steps.
var (
	hopMu    = float64(HopMean) / float64(herdStep)
	hopSigma = float64(HopStdDev) / float64(herdStep)
)

// countClass is what a client's next wait depends on.
type countClass struct {
	// waitLo and waitHi bound the next wait in steps; it is uniform in
	// between (equal bounds: exactly that wait).
	waitLo, waitHi float64
	// next is the class after a failure.
	next int
	// pmf is the distribution of the step of the next read, counted from
	// the step of the failed read (filled on first use), from pmfOff on.
	pmf    []float64
	pmfOff int
	// wide is set for a class whose clients arrive from a wait spread over
	// at least wideWait: they are pooled (see widePool).
	wide bool
	// narrowPool: pooled too, with the expected arrivals kept per step.
	narrowPool bool
}

type countedHerd struct {
	rnd          *rand.Rand
	pcg          *rand.PCG
	classes      []countClass
	nc           int
	mask         int
	cal          []int32 // ring of steps × classes
	tot          []int32 // reads per step
	capSteps     float64
	pools        []widePool
	wideClasses  []int
	narrowPooled bool
	// deco computes the herds of Decorrelated jitter.
	deco decorrelatedHerd
}

func (h *countedHerd) init(cfg HerdConfig) {
	if h.pcg == nil {
		h.pcg = rand.NewPCG(0, 0)
		h.rnd = rand.New(h.pcg)
	}
	h.pcg.Seed(cfg.Seed, 0x4e7d_0b5e)
	p := cfg.policy()
	h.capSteps = float64(cfg.Cap) / float64(herdStep)
	h.classes = h.classes[:0]
	switch cfg.Strategy {
	case None:
		h.classes = append(h.classes, countClass{next: 0})
	default:
		// class a: a failures so far; the next failure waits with exponent
		// a+1. The last class is the first whose wait has reached the cap.
		for a := 0; ; a++ {
			c := float64(p.Ceiling(a+1)) / float64(herdStep)
			var lo, hi float64
			switch cfg.Strategy {
			case Exponential:
				lo, hi = c, c
			case FullJitter:
				lo, hi = 0, c
			case EqualJitter:
				lo, hi = c/2, c
			}
			capped := p.Ceiling(a+1) == cfg.Cap
			next := a + 1
			if capped {
				next = a
			}
			h.classes = append(h.classes, countClass{waitLo: lo, waitHi: hi, next: next})
			if capped {
				break
			}
		}
	}
	h.nc = len(h.classes)
	h.wideClasses = h.wideClasses[:0]
	h.narrowPooled = false
	wide := float64(wideWait) / float64(herdStep)
	for c := range h.classes {
		cl := &h.classes[c]
		if (cfg.Strategy == None || cfg.Strategy == Exponential) && cfg.Clients > poolNarrowAbove {
			cl.narrowPool = true
			h.narrowPooled = true
			if !h.isWideTarget(cl.next) {
				h.wideClasses = append(h.wideClasses, cl.next)
			}
		}
		if cl.waitHi-cl.waitLo >= wide {
			// the pool of the class these clients arrive in
			cl.wide = true
			if !h.isWideTarget(cl.next) {
				h.wideClasses = append(h.wideClasses, cl.next)
			}
		}
	}
	// The calendar spans the longest wait plus the hops, rounded up to a
	// power of two so a step's slot is a mask away.
	span := int(h.capSteps) + int(hopMu*4+hopSigma*2*12) + 16
	size := 1
	for size < span {
		size <<= 1
	}
	h.mask = size - 1
	h.cal = resize(h.cal, size*h.nc)
	clear(h.cal)
	h.tot = resize(h.tot, size)
	clear(h.tot)
	if len(h.pools) < h.nc {
		h.pools = make([]widePool, h.nc)
	}
	for _, c := range h.wideClasses {
		pl := &h.pools[c]
		pl.n, pl.mass, pl.rate = 0, 0, 0
		pl.diff = resize(pl.diff, size)
		clear(pl.diff)
		pl.direct = resize(pl.direct, size)
		clear(pl.direct)
	}
}

// add puts x reads of class c in step t.
func (h *countedHerd) add(t, c int, x int32) {
	i := t & h.mask
	h.cal[i*h.nc+c] += x
	h.tot[i] += x
}

type countedCandidate struct {
	valid bool
	at    float64 // its write's moment, in steps
	class int
}

func (h *countedHerd) run(cfg HerdConfig) HerdResult {
	if cfg.Strategy == Decorrelated {
		return h.deco.run(cfg)
	}
	h.init(cfg)
	res := HerdResult{Config: cfg}
	// Every client's first read arrives after one hop.
	first, off := stepPMF(0, 0, hopMu, hopSigma, false)
	h.spread(off, 0, int32(cfg.Clients), first)
	active := cfg.Clients
	var cand countedCandidate
	var counts [64]int32
	var done float64
	mu2, sigma2 := 2*hopMu, math.Sqrt2*hopSigma
	for b := 0; active > 0; b++ {
		if res.Events >= MaxHerdEvents {
			res.Truncated = true
			break
		}
		res.Events++
		if len(h.wideClasses) > 0 {
			h.arrive(b)
			if h.narrowPooled && active <= poolNarrowAbove {
				h.unpool(b)
			}
		}
		i := b & h.mask
		r := h.tot[i]
		if r == 0 && !(cand.valid && cand.at < float64(b+1)) {
			continue
		}
		// Take the step's reads out of the calendar.
		var present uint64
		if r > 0 {
			row := h.cal[i*h.nc : (i+1)*h.nc]
			for c, x := range row {
				if x != 0 {
					counts[c] = x
					present |= 1 << uint(c)
				}
			}
			clear(row)
		}
		h.tot[i] = 0
		res.Work += int(r)
		lo := float64(b)
		if cand.valid && cand.at < float64(b+1) {
			// The candidate's write lands in this step: success. The reads
			// of this step before it fail; those after it are the next
			// round's first.
			active--
			res.Succeeded++
			done = max(done, cand.at+math.Abs(hopMu+hopSigma*h.rnd.NormFloat64()))
			f := cand.at - lo
			cand.valid = false
			if r > 0 && f > 0 {
				for m := present; m != 0; m &= m - 1 {
					c := bits.TrailingZeros64(m)
					x := int32(binomial(h.rnd, int(counts[c]), f))
					if x > 0 {
						h.scheduleFailed(b, c, x)
						counts[c] -= x
						r -= x
					}
				}
			}
			lo = cand.at
		}
		if r == 0 {
			continue
		}
		// The earliest write of this step's remaining reads.
		v := lo + minWrite(h.rnd, int(r), float64(b+1)-lo)
		if !cand.valid || v < cand.at {
			if cand.valid {
				// The old candidate's write meets a changed row: it
				// fails, replies, waits and reads again.
				w, next := h.wait(cand.class)
				t := cand.at + mu2 + sigma2*h.rnd.NormFloat64() + w
				h.add(max(int(t), b+1), next, 1)
			}
			// The reader is one of the step's reads, any of them alike.
			k := int32(h.rnd.Int64N(int64(r)))
			c := 0
			for m := present; m != 0; m &= m - 1 {
				c = bits.TrailingZeros64(m)
				if k < counts[c] {
					break
				}
				k -= counts[c]
			}
			counts[c]--
			cand = countedCandidate{valid: true, at: v, class: c}
		}
		for m := present; m != 0; m &= m - 1 {
			c := bits.TrailingZeros64(m)
			if counts[c] > 0 {
				h.scheduleFailed(b, c, counts[c])
			}
			counts[c] = 0
		}
	}
	res.CompletionTime = time.Duration(math.Round(done * float64(herdStep)))
	return res
}

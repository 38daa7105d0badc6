package sim

import (
	"math"
	"math/rand/v2"
	"sync"
	"time"
)

// decorrelatedHerd is the counted herd (see countedHerd) for Decorrelated
// jitter. A client's next wait depends on its previous one, a number that
// takes any value between base and cap, so clients cannot be counted by a
// few classes the way the other strategies' failure counts are: the
// calendar keeps, for each step, the previous wait of every client whose
// read arrives in it, and a failed client draws its next wait from its own.
//
// A step of the calendar is a list of waits. The server's rule needs no
// more of a step's reads than their number: the earliest write among them
// (minWrite), which read it is (any of them alike, so one picked at
// random), and that all the others fail. A failed client's wait, its
// moment within the step and its four hops come from one 64-bit draw.
//
// While more than poolNarrowAbove clients are left, the clients at the cap
// who draw the cap again (two in three) are not placed one by one: they
// join a pool with their expected arrivals per step, as the fixed waits of
// None and Exponential do (see poolNarrowAbove), and are placed one by one
// again when that many are left. While pooling, the reads whose previous
// wait was the cap (most of them: the pool's arrivals) are only counted per
// step (atCap), not listed, and those of a step that fail are split at once
// into the ones who wait the cap again (a binomial) and the rest, who each
// draw a wait below the cap: the same law as a draw for each, without one.
type decorrelatedHerd struct {
	pcg  *herdPCG // rand.PCG's numbers (see herdPCG)
	rnd  *rand.Rand
	mask int
	// ring holds per step (slot t&mask) the previous wait, in steps, of
	// each client whose read arrives in that step.
	ring [][]float32
	// atCap counts per step, while pooling, the reads of clients whose
	// previous wait was the cap; they are not in ring.
	atCap []int32
	// pAgain is the chance that a client whose previous wait was the cap
	// draws the cap again.
	pAgain float64
	// base and capSteps are the backoff's base and cap in steps.
	base, capSteps float64
	// pooled is set while the pool below takes the clients who wait the
	// cap again; again counts those of the current step.
	pooled bool
	pool   widePool
	again  int
	// capPMF is the distribution of the step of a read after a wait of
	// exactly the cap, counted from the failed read's step, from capOff on.
	capPMF []float64
	capOff int
	// placed is failAll's buffer.
	placed []placement
}

// decorrelatedCandidate is the read whose write is the earliest since the
// last success, with its client's previous wait.
type decorrelatedCandidate struct {
	valid bool
	at    float64 // its write's moment, in steps
	prev  float64
}

func (h *decorrelatedHerd) init(cfg HerdConfig) {
	if h.pcg == nil {
		h.pcg = new(herdPCG)
		h.rnd = rand.New(h.pcg)
	}
	h.pcg.Seed(cfg.Seed, 0x4e7d_0b5e)
	h.base = float64(cfg.Base) / float64(herdStep)
	h.capSteps = float64(cfg.Cap) / float64(herdStep)
	// The calendar spans the longest wait plus the hops, rounded up to a
	// power of two so a step's slot is a mask away.
	span := int(h.capSteps) + int(hopMu*4+hopSigma*2*12) + 16
	size := 1
	for size < span {
		size <<= 1
	}
	h.mask = size - 1
	if len(h.ring) != size {
		h.ring = make([][]float32, size)
	}
	for i := range h.ring {
		h.ring[i] = h.ring[i][:0]
	}
	h.atCap = resize(h.atCap, size)
	clear(h.atCap)
	// min(cap, uniform(base, 3·cap)) is the cap with chance 2·cap/(3·cap-base).
	h.pAgain = 2 * h.capSteps / (3*h.capSteps - h.base)
	h.pooled = cfg.Clients > poolNarrowAbove
	h.again = 0
	h.pool.n, h.pool.mass = 0, 0
	h.pool.direct = resize(h.pool.direct, size)
	clear(h.pool.direct)
	h.capPMF, h.capOff = stepPMF(h.capSteps, h.capSteps, 4*hopMu, 2*hopSigma, true)
	fourHopsOnce.Do(buildFourHops)
}

// fourHops are 1,024 quantiles, evenly spaced in probability, of the four
// hops of a failed client, in steps: its write's way there and back, and
// its new read's way there (the reply to it is folded into the next).
var (
	fourHopsOnce sync.Once
	fourHops     [1024]float32
)

func buildFourHops() {
	mu, sigma := 4*hopMu, 2*hopSigma
	for i := range fourHops {
		p := (float64(i) + 0.5) / float64(len(fourHops))
		lo, hi := -8.0, 8.0
		for range 60 {
			m := (lo + hi) / 2
			if normCDF(m) < p {
				lo = m
			} else {
				hi = m
			}
		}
		fourHops[i] = float32(mu + sigma*(lo+hi)/2)
	}
}

// put adds k reads of clients whose previous wait was prev to step t.
func (h *decorrelatedHerd) put(t int, prev float32, k int) {
	if h.pooled && float64(prev) == h.capSteps {
		h.atCap[t&h.mask] += int32(k)
		return
	}
	s := &h.ring[t&h.mask]
	for range k {
		*s = append(*s, prev)
	}
}

// failAll sends the clients whose reads in step b failed, with these
// previous waits, to their next read: two hops for the write, two for the
// reply and the new read, and the wait min(cap, uniform(base, 3·prev)).
// The wait (21 bits), the read's moment within its step (21 bits) and the
// four hops (10 bits, through fourHops) come from one draw.
func (h *decorrelatedHerd) failAll(b int, prevs []float32) {
	fb := float64(b)
	base, capSteps := h.base, h.capSteps
	pooled := h.pooled
	// The loop keeps the generator, the ring and the count in locals, so
	// that its stores into the ring do not make it load them again.
	g := *h.pcg
	ring, mask := h.ring, h.mask
	// While pooling, a wait of the cap is not placed: limit is the cap
	// then, else no wait reaches it.
	limit := math.Inf(1)
	if pooled {
		limit = capSteps
	}
	// First the draws, each kept in placed unless its client is pooled
	// (counted without a branch, whose outcome is a coin toss here), then
	// the placements, in the same order.
	placed := resize(h.placed, len(prevs))
	n := 0
	for _, p := range prevs {
		x := g.Uint64()
		w := min(capSteps, base+float64(x>>43)*0x1p-21*(3*float64(p)-base))
		u := float64((x>>10)&(1<<21-1)) * 0x1p-21
		t := max(int(fb+u+float64(fourHops[x&(uint64(len(fourHops))-1)])+w), b+1)
		placed[n] = placement{slot: int32(t & mask), wait: float32(w)}
		if w < limit {
			n++
		}
	}
	for _, pl := range placed[:n] {
		s := &ring[pl.slot]
		*s = append(*s, pl.wait)
	}
	h.placed = placed
	*h.pcg = g
	h.again += len(prevs) - n
}

// placement is a failed client's next read: its ring slot, and its wait.
type placement struct {
	slot int32
	wait float32
}

// failAtCap sends the k clients whose reads in step b failed and whose
// previous wait was the cap to their next read, while pooling: those who
// draw the cap again join the pool (again), Binomial(k, pAgain) of them;
// the others' waits are uniform between base and the cap, drawn as in
// failAll.
func (h *decorrelatedHerd) failAtCap(b int, k int) {
	if k <= 0 {
		return
	}
	again := binomial(h.rnd, k, h.pAgain)
	h.again += again
	fb := float64(b)
	base, span := h.base, h.capSteps-h.base
	g := *h.pcg
	ring, mask := h.ring, h.mask
	for range k - again {
		x := g.Uint64()
		w := base + float64(x>>43)*0x1p-21*span
		u := float64((x>>10)&(1<<21-1)) * 0x1p-21
		t := max(int(fb+u+float64(fourHops[x&(uint64(len(fourHops))-1)])+w), b+1)
		s := &ring[t&mask]
		*s = append(*s, float32(w))
	}
	*h.pcg = g
}

// poolAgain adds the clients of step b who wait the cap again to the
// pool, with their expected arrivals per step.
func (h *decorrelatedHerd) poolAgain(b int) {
	if h.again == 0 {
		return
	}
	k := float64(h.again)
	t0 := b + h.capOff
	for j, p := range h.capPMF {
		h.pool.direct[(t0+j)&h.mask] += k * p
	}
	h.pool.n += h.again
	h.pool.mass += k
	h.again = 0
}

// arrive places the pool's clients that arrive in step t, drawn from the
// pool's expected arrivals in that step against those still to come.
func (h *decorrelatedHerd) arrive(t int) {
	pl := &h.pool
	i := t & h.mask
	e := pl.direct[i]
	pl.direct[i] = 0
	if x := pl.take(h.rnd, e); x > 0 {
		h.put(t, float32(h.capSteps), x)
	}
}

// unpool places every pooled client in a step drawn from the pool's
// expected arrivals after step t, and ends pooling for the rest of the run.
func (h *decorrelatedHerd) unpool(t int) {
	pl := &h.pool
	total := 0.0
	for j := 1; j <= h.mask; j++ {
		total += pl.direct[(t+j)&h.mask]
	}
	rem := pl.n
	for j := 1; j <= h.mask && rem > 0; j++ {
		e := pl.direct[(t+j)&h.mask]
		var x int
		if e >= total || j == h.mask {
			x = rem
		} else if e > 0 {
			x = binomial(h.rnd, rem, e/total)
		}
		total -= e
		if x > 0 {
			h.put(t+j, float32(h.capSteps), x)
			rem -= x
		}
	}
	if rem > 0 {
		h.put(t+1, float32(h.capSteps), rem)
	}
	pl.n, pl.mass = 0, 0
	clear(pl.direct)
	h.pooled = false
	// The counted reads at the cap are listed again from here on.
	for i, k := range h.atCap {
		if k > 0 {
			h.atCap[i] = 0
			h.put(i, float32(h.capSteps), int(k))
		}
	}
}

func (h *decorrelatedHerd) run(cfg HerdConfig) HerdResult {
	h.init(cfg)
	res := HerdResult{Config: cfg}
	// Every client's first read arrives after one hop; its previous wait
	// counts as the base.
	first, off := stepPMF(0, 0, hopMu, hopSigma, false)
	rem, mass := cfg.Clients, 1.0
	for j, p := range first {
		if rem == 0 {
			break
		}
		x := rem
		if p < mass && j < len(first)-1 {
			x = binomial(h.rnd, rem, p/mass)
		}
		h.put(off+j, float32(h.base), x)
		rem -= x
		mass -= p
	}
	active := cfg.Clients
	var cand decorrelatedCandidate
	var done float64
	mu2, sigma2 := 2*hopMu, math.Sqrt2*hopSigma
	for b := 0; active > 0; b++ {
		if res.Events >= MaxHerdEvents {
			res.Truncated = true
			break
		}
		res.Events++
		if h.pooled {
			h.arrive(b)
			if active <= poolNarrowAbove {
				h.unpool(b)
			}
		}
		i := b & h.mask
		reads := h.ring[i]
		atCap := int(h.atCap[i])
		h.atCap[i] = 0
		r := len(reads) + atCap
		fb := float64(b)
		landing := cand.valid && cand.at < fb+1
		if r == 0 && !landing {
			continue
		}
		res.Work += r
		// The reads after the last success, or after this step's.
		after, lo := r, fb
		if landing {
			active--
			res.Succeeded++
			done = max(done, cand.at+math.Abs(hopMu+hopSigma*h.rnd.NormFloat64()))
			f := cand.at - lo
			cand.valid = false
			if r > 0 && f > 0 {
				after -= binomial(h.rnd, r, f)
			}
			lo = cand.at
		}
		if after > 0 {
			// The earliest write of the reads after lo.
			v := lo + minWrite(h.rnd, after, fb+1-lo)
			if !cand.valid || v < cand.at {
				if cand.valid {
					// The old candidate's write meets a changed row: it
					// fails, replies, waits and reads again.
					w := min(h.capSteps, h.base+h.rnd.Float64()*(3*cand.prev-h.base))
					t := cand.at + mu2 + sigma2*h.rnd.NormFloat64() + w
					h.put(max(int(t), b+1), float32(w), 1)
				}
				// The reader is any read of the step alike: whether a
				// read came before the success or after, it is one of
				// the step's reads picked at random.
				k := h.rnd.IntN(r)
				if k < len(reads) {
					n := len(reads)
					cand = decorrelatedCandidate{valid: true, at: v, prev: float64(reads[k])}
					reads[k] = reads[n-1]
					reads = reads[:n-1]
				} else {
					cand = decorrelatedCandidate{valid: true, at: v, prev: h.capSteps}
					atCap--
				}
			}
		}
		// Every other read of the step fails.
		h.failAll(b, reads)
		h.failAtCap(b, atCap)
		h.ring[i] = h.ring[i][:0]
		h.poolAgain(b)
	}
	res.CompletionTime = time.Duration(math.Round(done * float64(herdStep)))
	return res
}

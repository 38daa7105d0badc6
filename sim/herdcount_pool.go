package sim

import (
	"math/rand/v2"
	"time"
)

// poolNarrowAbove is the herd size above which the strategies with a
// fixed wait (None, Exponential) pool their clients too, with the expected
// arrivals kept step by step; once that many clients or fewer are left,
// the pooled clients are placed step by step (unpool) and followed exactly.
// Pooling lets a client arrive where any client of its class was expected
// to; that evens out lumps of a few clients, which shows when few are left
// (the completion time of 100 clients without backoff came out 3% late),
// not while thousands are on their way.
const poolNarrowAbove = 1000

// wideWait is the spread of a wait from which the clients a class sends
// back are pooled rather than placed one by one.
const wideWait = 128 * time.Millisecond

// widePool holds the clients on their way to a class whose waits are
// spread wide (full or equal jitter near the cap). A failed client's next
// read is then as likely in any step of a span of hundreds, so the number
// arriving in a step is the sum of very many rare chances: the pool keeps
// how many clients are on their way (n), the expected arrivals per step
// (rate, kept as differences so a span costs two entries) and the
// expected arrivals still to come (mass), and a step draws its arrivals as
// Binomial(n, rate/mass). That keeps the count of clients exact and the
// arrivals' mean exact; the four hops' spread (4 ms) is left out of these
// spans, as it moves at most a few per mille of their mass by a few ms.
type widePool struct {
	n    int
	mass float64
	rate float64
	diff []float64
	// direct holds expected arrivals per step from narrow kernels.
	direct []float64
}

// take draws how many of the pool's clients arrive in a step expected to
// bring e of them, Binomial(n, e/mass) (all of them once e is the mass
// left), and takes them and e out of the pool.
func (pl *widePool) take(rnd *rand.Rand, e float64) int {
	if pl.n == 0 {
		pl.mass = max(pl.mass-e, 0)
		return 0
	}
	var x int
	if pl.mass <= e || pl.mass < 1e-9 {
		x = pl.n
	} else {
		x = binomial(rnd, pl.n, e/pl.mass)
	}
	pl.mass = max(pl.mass-e, 0)
	pl.n -= x
	return x
}

// countedHerd holds the buffers of a counted run.

func (h *countedHerd) isWideTarget(c int) bool {
	for _, w := range h.wideClasses {
		if w == c {
			return true
		}
	}
	return false
}

// pool sends k clients to the wide pool of class c, arriving uniformly
// over the steps [x0, x1).
func (h *countedHerd) pool(c int, k int32, x0, x1 float64) {
	pl := &h.pools[c]
	d := float64(k) / (x1 - x0)
	t0, t1 := int(x0), int(x1)
	f0, f1 := x0-float64(t0), x1-float64(t1)
	pl.diff[t0&h.mask] += d * (1 - f0)
	pl.diff[(t0+1)&h.mask] += d * f0
	pl.diff[t1&h.mask] -= d * (1 - f1)
	pl.diff[(t1+1)&h.mask] -= d * f1
	pl.n += int(k)
	pl.mass += float64(k)
}

// unpool places the clients of the narrow pools in the calendar, each in
// a step drawn from the pool's expected arrivals after step t, and ends
// pooling for the rest of the run.
func (h *countedHerd) unpool(t int) {
	for _, c := range h.wideClasses {
		pl := &h.pools[c]
		total := 0.0
		for j := 1; j <= h.mask; j++ {
			total += pl.direct[(t+j)&h.mask]
		}
		rem := pl.n
		for j := 1; j <= h.mask && rem > 0; j++ {
			i := (t + j) & h.mask
			e := pl.direct[i]
			var x int
			if e >= total || j == h.mask {
				x = rem
			} else if e > 0 {
				x = binomial(h.rnd, rem, e/total)
			}
			total -= e
			if x > 0 {
				h.add(t+j, c, int32(x))
				rem -= x
			}
		}
		if rem > 0 {
			h.add(t+1, c, int32(rem))
		}
		pl.n, pl.mass, pl.rate = 0, 0, 0
		clear(pl.direct)
	}
	for c := range h.classes {
		h.classes[c].narrowPool = false
	}
	h.wideClasses = h.wideClasses[:0]
	h.narrowPooled = false
}

// arrive moves the clients of the wide pools that arrive in step t into
// the calendar.
func (h *countedHerd) arrive(t int) {
	i := t & h.mask
	for _, c := range h.wideClasses {
		pl := &h.pools[c]
		pl.rate += pl.diff[i]
		pl.diff[i] = 0
		e := max(pl.rate, 0) + pl.direct[i]
		pl.direct[i] = 0
		if x := pl.take(h.rnd, e); x > 0 {
			h.add(t, c, int32(x))
		}
	}
}

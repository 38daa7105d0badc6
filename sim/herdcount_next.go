package sim

// wait draws the next wait of a client of class c, in steps, and the class
// it moves to.
func (h *countedHerd) wait(c int) (float64, int) {
	cl := &h.classes[c]
	if cl.waitHi == cl.waitLo {
		return cl.waitLo, cl.next
	}
	return cl.waitLo + h.rnd.Float64()*(cl.waitHi-cl.waitLo), cl.next
}

// scheduleFailed sends k clients of class c whose reads in step b failed
// to their next read: two hops for the write, two for the reply and the
// new read, and the wait.
func (h *countedHerd) scheduleFailed(b, c int, k int32) {
	cl := &h.classes[c]
	if cl.wide {
		x0 := float64(b) + 0.5 + 4*hopMu + cl.waitLo
		h.pool(cl.next, k, x0, x0+cl.waitHi-cl.waitLo)
		return
	}
	if cl.narrowPool {
		if cl.pmf == nil {
			cl.pmf, cl.pmfOff = stepPMF(cl.waitLo, cl.waitHi, 4*hopMu, 2*hopSigma, true)
		}
		pl := &h.pools[cl.next]
		t0 := b + cl.pmfOff
		kf := float64(k)
		for j, p := range cl.pmf {
			pl.direct[(t0+j)&h.mask] += kf * p
		}
		pl.n += int(k)
		pl.mass += kf
		return
	}
	if cl.pmf == nil {
		cl.pmf, cl.pmfOff = stepPMF(cl.waitLo, cl.waitHi, 4*hopMu, 2*hopSigma, true)
	}
	if int(k)*8 >= len(cl.pmf) {
		h.spread(b+cl.pmfOff, cl.next, k, cl.pmf)
		return
	}
	mu, sigma := 4*hopMu, 2*hopSigma
	for range k {
		w, next := h.wait(c)
		t := float64(b) + h.rnd.Float64() + mu + sigma*h.rnd.NormFloat64() + w
		h.add(max(int(t), b+1), next, 1)
	}
}

// spread adds k clients of class c over the steps from t0 on with the
// probabilities pmf: a multinomial drawn as sequential binomials.
func (h *countedHerd) spread(t0, c int, k int32, pmf []float64) {
	rem := int(k)
	mass := 1.0
	for j, p := range pmf {
		if rem == 0 {
			return
		}
		var x int
		if p >= mass || j == len(pmf)-1 {
			x = rem
		} else {
			x = binomial(h.rnd, rem, p/mass)
		}
		if x > 0 {
			h.add(t0+j, c, int32(x))
			rem -= x
		}
		mass -= p
	}
}

// countedCandidate is the read whose write is the earliest since the last
// success: the next success unless an earlier write turns up.

package sim

import (
	"math"
	"math/rand/v2"
	"sync"
)

// stepPMF is the distribution of floor(Y) where Y = U + X + W: U uniform
// in [0, 1) if withU (a read's moment within its step), X Normal(mu,
// sigma), W uniform in [lo, hi] (or exactly lo). It covers X within ±4.5
// sigma and returns the probabilities from the first step on, and that
// step.
func stepPMF(lo, hi, mu, sigma float64, withU bool) ([]float64, int) {
	from := int(math.Floor(lo + mu - 4.5*sigma))
	to := int(math.Ceil(hi + mu + 7*sigma + 1))
	from = max(from, 0)
	pmf := make([]float64, to-from+1)
	// cdf(y) = P(Y < y) for the given shape.
	var cdf func(y float64) float64
	switch {
	case withU && hi > lo:
		// P(Y < y) = E[(y - W - U - X) ≥ 0] = (G(y-lo) - G(y-hi))/(hi-lo)
		// with G the antiderivative in y of P(U+X < y).
		cdf = func(y float64) float64 { return (antiUX(y-lo, mu, sigma) - antiUX(y-hi, mu, sigma)) / (hi - lo) }
	case withU:
		cdf = func(y float64) float64 { return cdfUX(y-lo, mu, sigma) }
	default:
		cdf = func(y float64) float64 { return normCDF((y - lo - mu) / sigma) }
	}
	sum := 0.0
	prev := cdf(float64(from))
	for j := range pmf {
		c := cdf(float64(from + j + 1))
		pmf[j] = max(c-prev, 0)
		prev = c
		sum += pmf[j]
	}
	for j := range pmf {
		pmf[j] /= sum
	}
	return pmf, from
}

func normCDF(z float64) float64 { return 0.5 * math.Erfc(-z/math.Sqrt2) }
func normPDF(z float64) float64 { return math.Exp(-z*z/2) / math.Sqrt(2*math.Pi) }

// stopLoss is E[(d - Z)^+] for Z ~ Normal(0, sigma): the antiderivative of
// P(Z < d).
func stopLoss(d, sigma float64) float64 {
	z := d / sigma
	return d*normCDF(z) + sigma*normPDF(z)
}

// stopLossInt is the antiderivative of stopLoss in d.
func stopLossInt(d, sigma float64) float64 {
	z := d / sigma
	return (d*d+sigma*sigma)/2*normCDF(z) + d*sigma/2*normPDF(z)
}

// cdfUX is P(U + X < y), U uniform [0,1), X Normal(mu, sigma).
func cdfUX(y, mu, sigma float64) float64 {
	return stopLoss(y-mu, sigma) - stopLoss(y-1-mu, sigma)
}

// antiUX is the antiderivative of cdfUX in y.
func antiUX(y, mu, sigma float64) float64 {
	return stopLossInt(y-mu, sigma) - stopLossInt(y-1-mu, sigma)
}

// binomial draws from Binomial(n, p): exactly by inversion when the mean
// (of the rarer outcome) is under 20, else from the normal approximation
// with continuity correction, clamped to [0, n].
func binomial(rnd *rand.Rand, n int, p float64) int {
	switch {
	case n <= 0 || p <= 0:
		return 0
	case p >= 1:
		return n
	case p > 0.5:
		return n - binomial(rnd, n, 1-p)
	}
	mean := float64(n) * p
	if mean < 20 {
		q := 1 - p
		s := p / q
		a := float64(n+1) * s
		f := math.Exp(float64(n) * math.Log1p(-p))
		u := rnd.Float64()
		k := 0
		for u > f && k < n {
			u -= f
			k++
			f *= a/float64(k) - s
		}
		return k
	}
	x := math.Floor(mean + math.Sqrt(mean*(1-p))*rnd.NormFloat64() + 0.5)
	return int(min(max(x, 0), float64(n)))
}

// Tables of the earliest write of a step's reads. A read at lo + U·w
// (U uniform [0,1)) writes D later, D ~ Normal(2 hops): V = U·w + D. For
// minTableWidths widths w, minTables hold x and logit(P(V < x)) on a fine
// grid, so the minimum of R reads, whose CDF is 1 - (1-F)^R, is drawn by
// inverting F at one uniform.
const minTableWidths = 16

type minTable struct {
	x, logit []float64
}

var (
	minTablesOnce sync.Once
	minTables     [minTableWidths + 1]minTable
)

func buildMinTables() {
	mu, sigma := 2*hopMu, math.Sqrt2*hopSigma
	const perSigma = 48
	const quad = 16
	for wi := 1; wi <= minTableWidths; wi++ {
		w := float64(wi) / minTableWidths
		lo, hi := mu-11*sigma, mu+w+11*sigma
		n := int((hi-lo)/sigma*perSigma) + 1
		t := minTable{x: make([]float64, n), logit: make([]float64, n)}
		for i := range n {
			x := lo + float64(i)*sigma/perSigma
			// F and 1-F by the midpoint rule over U, each from its own
			// tail so neither loses its digits.
			var f, g float64
			for k := range quad {
				u := (float64(k) + 0.5) / quad * w
				z := (x - u - mu) / sigma
				f += normCDF(z)
				g += normCDF(-z)
			}
			t.x[i] = x
			t.logit[i] = math.Log(f) - math.Log(g)
		}
		minTables[wi] = t
	}
}

// minWrite draws min over r reads of U·w + D, in steps after the start of
// the reads' span of width w.
func minWrite(rnd *rand.Rand, r int, w float64) float64 {
	mu, sigma := 2*hopMu, math.Sqrt2*hopSigma
	if r <= 8 {
		best := math.Inf(1)
		for range r {
			best = min(best, rnd.Float64()*w+mu+sigma*rnd.NormFloat64())
		}
		return best
	}
	minTablesOnce.Do(buildMinTables)
	t := &minTables[min(max(int(math.Round(w*minTableWidths)), 1), minTableWidths)]
	// P(min > x) = (1-F)^r = u, so 1-F = u^(1/r) and F = 1 - u^(1/r).
	u := 1 - rnd.Float64() // (0, 1]
	lu := math.Log(u) / float64(r)
	logF := math.Log(-math.Expm1(lu))
	y := logF - lu // logit(F)
	// The first index whose logit is y or more (sort.SearchFloat64s,
	// without its call through a function value).
	j, n := 0, len(t.logit)
	for j < n {
		m := int(uint(j+n) >> 1)
		if t.logit[m] < y {
			j = m + 1
		} else {
			n = m
		}
	}
	switch {
	case j == 0:
		return t.x[0]
	case j >= len(t.x):
		return t.x[len(t.x)-1]
	}
	a, b := t.logit[j-1], t.logit[j]
	return t.x[j-1] + (y-a)/(b-a)*(t.x[j]-t.x[j-1])
}

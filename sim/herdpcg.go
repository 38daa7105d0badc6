package sim

import "math/bits"

// herdPCG is math/rand/v2's PCG (the same state, steps and output, so a
// seed gives the same numbers), as a type of this package: its Uint64 is
// small enough to be inlined into the loops that draw one number per
// client, and a loop can keep a copy of it in registers and store it back
// after. rand.New over it draws what rand.New over a rand.PCG would.
type herdPCG struct{ hi, lo uint64 }

// Seed sets the state as rand.PCG's Seed does.
func (p *herdPCG) Seed(seed1, seed2 uint64) { p.hi, p.lo = seed1, seed2 }

// Uint64 advances the state and returns the next number, as rand.PCG's
// Uint64 does (a 128-bit LCG step, then DXSM).
func (p *herdPCG) Uint64() uint64 {
	const (
		mulHi = 2549297995355413924
		mulLo = 4865540595714422341
		incHi = 6364136223846793005
		incLo = 1442695040888963407
	)
	hi, lo := bits.Mul64(p.lo, mulLo)
	hi += p.hi*mulLo + p.lo*mulHi
	lo, c := bits.Add64(lo, incLo, 0)
	hi, _ = bits.Add64(hi, incHi, c)
	p.lo, p.hi = lo, hi
	const cheapMul = 0xda942042e4dd58b5
	hi ^= hi >> 32
	hi *= cheapMul
	hi ^= hi >> 48
	hi *= lo | 1
	return hi
}

package sim

import (
	"math/rand/v2"
	"testing"
)

// TestHerdPCGIsRandPCG checks that herdPCG gives rand.PCG's numbers for the
// same seeds, directly and through rand.New, so the herds computed with it
// are the herds computed with rand.PCG.
func TestHerdPCGIsRandPCG(t *testing.T) {
	for _, seed := range []uint64{0, 1, 2026, 1 << 63, ^uint64(0)} {
		var ours herdPCG
		ours.Seed(seed, 0x4e7d_0b5e)
		theirs := rand.NewPCG(seed, 0x4e7d_0b5e)
		for i := range 1000 {
			if a, b := ours.Uint64(), theirs.Uint64(); a != b {
				t.Fatalf("seed %d, number %d: %#x, rand.PCG gives %#x", seed, i, a, b)
			}
		}
		r1, r2 := rand.New(&ours), rand.New(theirs)
		for i := range 1000 {
			if a, b := r1.NormFloat64(), r2.NormFloat64(); a != b {
				t.Fatalf("seed %d, normal %d: %v, rand.PCG gives %v", seed, i, a, b)
			}
		}
	}
}

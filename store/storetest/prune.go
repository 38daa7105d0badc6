package storetest

import (
	"slices"
	"testing"
	"time"
)

// ReportPruneWaits reports, for the prune benchmarks of both backends, how
// long a prune took and the payments' p99 and slowest wait during it and in
// a window of the same length right after it: the second pair is the
// baseline the first is read against, since a loaded machine slows payments
// with or without a prune.
func ReportPruneWaits(b *testing.B, took time.Duration, during, after []time.Duration) {
	b.Helper()
	if len(during) == 0 || len(after) == 0 {
		b.Fatalf("%d payments during the prune, %d after", len(during), len(after))
	}
	slices.Sort(during)
	slices.Sort(after)
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	b.ReportMetric(float64(took.Milliseconds()), "prune-ms")
	b.ReportMetric(float64(len(during)), "payments")
	b.ReportMetric(ms(during[len(during)*99/100]), "p99-payment-ms")
	b.ReportMetric(ms(during[len(during)-1]), "max-payment-ms")
	b.ReportMetric(ms(after[len(after)*99/100]), "p99-payment-ms-no-prune")
	b.ReportMetric(ms(after[len(after)-1]), "max-payment-ms-no-prune")
}

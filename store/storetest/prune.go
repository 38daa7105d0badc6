package storetest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"paytwice/pay"
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

// PruneStopsWhenCtxEnds prunes a store holding keys old done keys (and
// nothing else done) and ends the prune's context as soon as the first
// batches are gone. The prune must stop with context.Canceled and report
// exactly the keys it deleted: the done keys left and the count it
// reports add up to keys. A prune that finished before its context
// ended must have deleted them all.
func PruneStopsWhenCtxEnds(t *testing.T, db pay.Store, cutoff time.Time, keys int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		pruned pay.Pruned
		err    error
	}
	ended := make(chan result, 1)
	go func() {
		p, err := db.Prune(ctx, cutoff)
		ended <- result{p, err}
	}()
	var r result
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	// Bounded: a prune of these few keys ends long before a minute of ticks.
	for i := 0; ; i++ {
		if i == 60_000 {
			t.Fatal("the prune never ended")
		}
		select {
		case r = <-ended:
		case <-tick.C:
			if _, done, err := db.KeyCounts(context.Background()); err == nil && done < keys {
				cancel()
			}
			continue
		}
		break
	}
	_, left, err := db.KeyCounts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case r.err == nil && r.pruned.Keys != keys:
		t.Fatalf("the prune ended without an error after %d of %d keys", r.pruned.Keys, keys)
	case r.err != nil && !errors.Is(r.err, context.Canceled):
		t.Fatalf("the prune failed: %v", r.err)
	case r.pruned.Keys+left != keys:
		t.Fatalf("the prune reported %d keys and %d of %d are left", r.pruned.Keys, left, keys)
	case r.err == nil:
		t.Logf("the prune deleted all %d keys before its context ended", keys)
	}
}

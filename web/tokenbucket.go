package web

import (
	"sync"
	"time"
)

// bucketTable is a token bucket per key (a client address), in memory.
// It is bounded: an entry whose bucket is full again is forgotten at the
// next sweep, one idle for Limits.IdleAfter is forgotten whatever it
// holds, and when the table is full a new key takes the place of the key
// idle longest. A new address is never refused because others filled the
// table.
type bucketTable struct {
	now   func() time.Time
	rate  Rate
	max   int
	idle  time.Duration
	mu    sync.Mutex
	items map[string]*tokenBucket
	swept time.Time
	// peak is the most keys items has held since it was made: a Go map
	// keeps the room it grew to after its keys are deleted, so a sweep
	// that leaves it far emptier than that makes a new one (shrunk).
	peak int
}

type tokenBucket struct {
	tokens float64
	at     time.Time // when tokens was last brought up to date
	used   time.Time // when the key last asked
}

func newBucketTable(now func() time.Time, rate Rate, max int, idle time.Duration) *bucketTable {
	return &bucketTable{now: now, rate: rate, max: max, idle: idle, items: map[string]*tokenBucket{}}
}

// take uses one token of key's when it has one and returns 0; otherwise
// it returns how long until it has one, and uses nothing.
func (t *bucketTable) take(key string) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	b := t.bucketLocked(key, now)
	if b.tokens < 1 {
		return time.Duration((1 - b.tokens) * float64(t.rate.Every))
	}
	b.tokens--
	return 0
}

// bucketLocked is key's bucket brought up to now, made when it is new.
func (t *bucketTable) bucketLocked(key string, now time.Time) *tokenBucket {
	if now.Sub(t.swept) > t.idle/4 {
		t.sweepLocked(now)
	}
	b, ok := t.items[key]
	if !ok {
		if len(t.items) >= t.max {
			t.evictLocked()
		}
		b = &tokenBucket{tokens: float64(t.rate.Burst), at: now}
		t.items[key] = b
		t.peak = max(t.peak, len(t.items))
	}
	if d := now.Sub(b.at); d > 0 {
		b.tokens = min(float64(t.rate.Burst), b.tokens+float64(d)/float64(t.rate.Every))
		b.at = now
	}
	b.used = now
	return b
}

// reserve takes one of key's tokens, now or when it comes back: it
// returns how long the caller must wait for it. A wait longer than most
// takes nothing and says how long it would have been, ok false.
func (t *bucketTable) reserve(key string, most time.Duration) (wait time.Duration, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.bucketLocked(key, t.now())
	b.tokens--
	if b.tokens >= 0 {
		return 0, true
	}
	wait = time.Duration(-b.tokens * float64(t.rate.Every))
	if wait > most {
		b.tokens++
		return wait, false
	}
	return wait, true
}

// due is how long until key has a token's worth again (0 when it has):
// a bucket that counts work done rather than requests may go below zero,
// and nothing starts until it has paid that back.
func (t *bucketTable) due(key string) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.bucketLocked(key, t.now())
	if b.tokens >= 1 {
		return 0
	}
	return time.Duration((1 - b.tokens) * float64(t.rate.Every))
}

// charge takes n tokens of key's, after the work they count was done:
// the bucket may go below zero, down to one burst.
func (t *bucketTable) charge(key string, n float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.bucketLocked(key, t.now())
	b.tokens = max(b.tokens-n, -float64(t.rate.Burst))
}

// giveBack returns a token reserve took and did not use.
func (t *bucketTable) giveBack(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if b, ok := t.items[key]; ok {
		b.tokens = min(float64(t.rate.Burst), b.tokens+1)
	}
}

// sweepLocked forgets the keys idle too long and those whose bucket has
// filled up again: a new bucket would be the same.
func (t *bucketTable) sweepLocked(now time.Time) {
	t.swept = now
	for k, b := range t.items {
		refilled := b.tokens+float64(now.Sub(b.at))/float64(t.rate.Every) >= float64(t.rate.Burst)
		if idle := now.Sub(b.used); idle > t.idle || refilled {
			delete(t.items, k)
		}
	}
	t.items, t.peak = shrunk(t.items, t.peak)
}

// shrunk is m itself, or a copy of it that takes only the room its keys
// need when they are fewer than a quarter of peak, the most it held: a Go
// map never gives back the room it grew to, so without this a table that
// an attack from thousands of addresses filled would keep their room
// once they are forgotten. It returns the peak to count from.
func shrunk[V any](m map[string]V, peak int) (map[string]V, int) {
	if len(m)*4 >= peak || peak < 64 {
		return m, peak
	}
	out := make(map[string]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out, len(m)
}

// evictLocked makes room for one key: the one that asked longest ago
// goes.
func (t *bucketTable) evictLocked() {
	var oldest string
	var at time.Time
	first := true
	for k, b := range t.items {
		if first || b.used.Before(at) {
			oldest, at, first = k, b.used, false
		}
	}
	delete(t.items, oldest)
}

// forgetIdle forgets the keys idle too long, and those whose bucket is
// full again, now rather than at the next use.
func (t *bucketTable) forgetIdle() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sweepLocked(t.now())
}

// size is how many keys the table holds.
func (t *bucketTable) size() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.items)
}

package store

import (
	"sync"

	"paytwice/pay"
)

// replayCache holds the saved responses of done keys. A done key's
// response never changes, so a cached copy is never stale; it only has to
// be dropped when the key itself is pruned or reset. Eviction is FIFO:
// replays cluster right after the first request, so the oldest entries
// are the least likely to be asked for again.
type replayCache struct {
	mu    sync.RWMutex
	max   int
	items map[cacheKey]pay.Response
	order []cacheKey // ring of insertion order
	next  int
}

type cacheKey struct{ scope, key string }

func newReplayCache(max int) *replayCache {
	return &replayCache{max: max, items: make(map[cacheKey]pay.Response, min(max, 1024))}
}

func (c *replayCache) get(scope, key string) (pay.Response, bool) {
	c.mu.RLock()
	r, ok := c.items[cacheKey{scope, key}]
	c.mu.RUnlock()
	return r, ok
}

func (c *replayCache) put(scope, key string, r pay.Response) {
	k := cacheKey{scope, key}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.items[k]; ok {
		c.items[k] = r
		return
	}
	if len(c.order) < c.max {
		c.order = append(c.order, k)
	} else {
		delete(c.items, c.order[c.next])
		c.order[c.next] = k
		c.next = (c.next + 1) % c.max
	}
	c.items[k] = r
}

// drop forgets a key. Its slot in the ring stays until it is reused, which
// at worst evicts nothing for one turn.
func (c *replayCache) drop(scope, key string) {
	c.mu.Lock()
	delete(c.items, cacheKey{scope, key})
	c.mu.Unlock()
}

func (c *replayCache) clear() {
	c.mu.Lock()
	clear(c.items)
	c.order = c.order[:0]
	c.next = 0
	c.mu.Unlock()
}

// claimsHeld are the keys this process claimed and has not yet completed
// or released, with their rows as claimed. Only one process serves a
// SQLite file, so a key held here is started on disk too: a request that
// repeats one (same fingerprint: a double click, a storm) is answered
// from here, 409, without queuing behind other keys' commits in the
// single writer. Anything else goes to the writer as before.
type claimsHeld struct {
	mu   sync.Mutex
	rows map[cacheKey]pay.KeyRow
}

func (h *claimsHeld) get(scope, key string) (pay.KeyRow, bool) {
	h.mu.Lock()
	r, ok := h.rows[cacheKey{scope, key}]
	h.mu.Unlock()
	return r, ok
}

func (h *claimsHeld) put(r pay.KeyRow) {
	h.mu.Lock()
	if h.rows == nil {
		h.rows = map[cacheKey]pay.KeyRow{}
	}
	h.rows[cacheKey{r.Scope, r.Key}] = r
	h.mu.Unlock()
}

func (h *claimsHeld) drop(scope, key string) {
	h.mu.Lock()
	delete(h.rows, cacheKey{scope, key})
	h.mu.Unlock()
}

func (h *claimsHeld) clear() {
	h.mu.Lock()
	clear(h.rows)
	h.mu.Unlock()
}

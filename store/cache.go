package store

import (
	"math"
	"strings"
	"sync"

	"paytwice/pay"
)

// replayCache holds the saved responses of done keys. A done key's
// response never changes, so a cached copy is never stale; it only has to
// be dropped when the key itself is pruned or reset. Eviction is FIFO:
// replays cluster right after the first request, so the oldest entries
// are the least likely to be asked for again.
//
// A full cache is most of a busy server's live heap (100,000 keys by
// default), so an entry is kept small: its fingerprint, key and body in
// one string, which the map's key and the ring share, and the scope, one
// of a class's few callers, kept once for all its keys.
type replayCache struct {
	mu     sync.RWMutex
	max    int
	items  map[cacheKey]savedResponse
	order  []cacheKey // ring of insertion order
	next   int
	scopes map[string]string // each scope's one copy
}

type cacheKey struct{ scope, key string }

// savedResponse is a cached response: saved holds the fingerprint, then
// the key (which the entry's cacheKey points into), then the body.
type savedResponse struct {
	saved  string
	fpLen  uint16
	keyLen uint16
	status uint16
}

// maxCachedScopes bounds the scopes kept once: past it they are forgotten
// all at once, and the entries already cached keep the copies they have.
const maxCachedScopes = 4096

func newReplayCache(max int) *replayCache {
	return &replayCache{max: max, items: make(map[cacheKey]savedResponse, min(max, 1024)), scopes: map[string]string{}}
}

func (c *replayCache) get(scope, key string) (pay.Response, bool) {
	c.mu.RLock()
	e, ok := c.items[cacheKey{scope, key}]
	c.mu.RUnlock()
	if !ok {
		return pay.Response{}, false
	}
	// The body is copied: the caller may keep or change its slice, and
	// the entry's string may not change.
	return pay.Response{Fingerprint: e.saved[:e.fpLen], Status: int(e.status), Body: []byte(e.saved[int(e.fpLen)+int(e.keyLen):])}, true
}

func (c *replayCache) put(scope, key string, r pay.Response) {
	if len(r.Fingerprint) > math.MaxUint16 || len(key) > math.MaxUint16 || r.Status < 0 || r.Status > math.MaxUint16 {
		return // no such key or response is made; a miss only costs a read
	}
	var b strings.Builder
	b.Grow(len(r.Fingerprint) + len(key) + len(r.Body))
	b.WriteString(r.Fingerprint)
	b.WriteString(key)
	b.Write(r.Body)
	e := savedResponse{saved: b.String(), fpLen: uint16(len(r.Fingerprint)), keyLen: uint16(len(key)), status: uint16(r.Status)}
	c.mu.Lock()
	defer c.mu.Unlock()
	k := cacheKey{c.scope(scope), e.saved[len(r.Fingerprint) : len(r.Fingerprint)+len(key)]}
	if _, ok := c.items[k]; ok {
		return // a done key's response never changes: this is the same one
	}
	if len(c.order) < c.max {
		c.order = append(c.order, k)
	} else {
		delete(c.items, c.order[c.next])
		c.order[c.next] = k
		c.next = (c.next + 1) % c.max
	}
	c.items[k] = e
}

// scope returns the cache's copy of scope, keeping it if it is new. The
// caller holds mu.
func (c *replayCache) scope(scope string) string {
	if kept, ok := c.scopes[scope]; ok {
		return kept
	}
	if len(c.scopes) >= maxCachedScopes {
		clear(c.scopes)
	}
	scope = strings.Clone(scope) // not a substring of a larger request string
	c.scopes[scope] = scope
	return scope
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
	clear(c.scopes)
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

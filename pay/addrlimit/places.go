package addrlimit

import (
	"sync"
	"time"
)

// Places remembers the few places (addresses, or digests of the tokens a
// front door saw a server recognise) the presenter has been recognised
// by lately, each for a while after it was last noted.
type Places struct {
	now  func() time.Time
	keep time.Duration
	mu   sync.Mutex
	seen map[string]time.Time
}

// PlacesKept is how many addresses the presenter may be known on at once
// (a laptop, a phone, a tablet at the front): the oldest goes.
const PlacesKept = 8

// NewPlaces remembers an address for keep after it was last noted, by
// the clock now.
func NewPlaces(now func() time.Time, keep time.Duration) *Places {
	return &Places{now: now, keep: keep, seen: make(map[string]time.Time)}
}

// Note remembers that the presenter was recognised from addr now.
func (p *Places) Note(addr string) {
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.seen[addr]; !ok && len(p.seen) >= PlacesKept {
		oldest, at := "", now
		for a, t := range p.seen {
			if oldest == "" || t.Before(at) {
				oldest, at = a, t
			}
		}
		delete(p.seen, oldest)
	}
	p.seen[addr] = now
}

// Has reports whether the presenter was recognised from addr lately.
func (p *Places) Has(addr string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	at, ok := p.seen[addr]
	return ok && p.now().Sub(at) <= p.keep
}

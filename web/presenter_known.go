package web

import (
	"crypto/sha256"
	"crypto/subtle"
	"sync"
	"time"
)

// knownTokens spares the presenter a transaction on the shared count of
// wrong tokens for each request sent with the token in the header: once
// that count has taken the token from an address, the address and a hash
// of the token are kept for a while, and the same token from the same
// address is taken from memory. It is kept safe for the limit on wrong
// tokens in three ways:
//   - it is only asked while this server's mirror of the count says the
//     address has tries left (an address out of tries is refused as
//     before, right token included);
//   - a token that differs ends the address's entry at once, and then
//     goes to the shared count like any guess, counted and refused as
//     before: a guesser at the presenter's address gets at most one
//     comparison with the entry per recognition the presenter paid for,
//     and only a right one could tell it anything;
//   - an entry lapses knownTokenFor after the shared count took the token,
//     and every entry is forgotten on the room's reset.
//
// Only the hash of a token is kept, never the token; a server started
// with another token never matches an entry of the old one (the process,
// and its memory, ends with the token).
type knownTokens struct {
	now    func() time.Time
	mu     sync.Mutex
	byAddr map[string]knownToken
}

type knownToken struct {
	sum [sha256.Size]byte
	at  time.Time
}

// How many addresses the presenter's token is known on at once (a
// laptop, a phone, a tablet; the oldest goes), and for how long after the
// shared count last took it there.
const (
	knownTokensKept = 8
	knownTokenFor   = time.Minute
)

func newKnownTokens(now func() time.Time) *knownTokens {
	return &knownTokens{now: now, byAddr: make(map[string]knownToken, knownTokensKept)}
}

// match reports whether got is the token the shared count took from addr
// within knownTokenFor; a token that differs ends addr's entry.
func (k *knownTokens) match(addr, got string) bool {
	sum := sha256.Sum256([]byte(got))
	k.mu.Lock()
	defer k.mu.Unlock()
	e, ok := k.byAddr[addr]
	if !ok {
		return false
	}
	if k.now().Sub(e.at) > knownTokenFor || subtle.ConstantTimeCompare(sum[:], e.sum[:]) != 1 {
		delete(k.byAddr, addr)
		return false
	}
	return true
}

// remember keeps that the shared count took got from addr now.
func (k *knownTokens) remember(addr, got string) {
	now := k.now()
	e := knownToken{sum: sha256.Sum256([]byte(got)), at: now}
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.byAddr[addr]; !ok && len(k.byAddr) >= knownTokensKept {
		oldest, at := "", now
		for a, t := range k.byAddr {
			if oldest == "" || t.at.Before(at) {
				oldest, at = a, t.at
			}
		}
		delete(k.byAddr, oldest)
	}
	k.byAddr[addr] = e
}

// forget ends every entry: the room was reset.
func (k *knownTokens) forget() {
	k.mu.Lock()
	defer k.mu.Unlock()
	clear(k.byAddr)
}

// size is how many addresses the token is known on now.
func (k *knownTokens) size() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.byAddr)
}

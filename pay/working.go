package pay

import "sync"

// A storm of repeats (a double-click, a client retrying in a loop, a
// thousand requests with one key) mostly arrives while the first request
// is at work. Its key row is then started, held by that request's claim,
// from the moment the claim commits until the work writes its outcome,
// and every repeat of the same request that reads the row is told 409.
// This process knows that without reading it: between its claim and its
// write, a claimed key is listed here, and a repeat with the same
// fingerprint is answered 409 from the list, with no round trip and no
// place in the writer's queue. A request with another fingerprint goes
// on to the store, which alone knows the whole answer (the key's kept
// charge may refuse it first).

// workingKeys are the keys whose claim this process won and whose work
// has not yet begun to write its outcome.
type workingKeys struct {
	mu   sync.Mutex
	keys map[scopedKey]workingClaim
}

type scopedKey struct{ scope, key string }

type workingClaim struct {
	claim, fingerprint string
}

// add lists the key while its claim's work runs.
func (w *workingKeys) add(scope, key, claim, fingerprint string) {
	w.mu.Lock()
	if w.keys == nil {
		w.keys = map[scopedKey]workingClaim{}
	}
	w.keys[scopedKey{scope, key}] = workingClaim{claim: claim, fingerprint: fingerprint}
	w.mu.Unlock()
}

// remove takes the key off the list, if claim still holds it there: from
// now on the key's row may change.
func (w *workingKeys) remove(scope, key, claim string) {
	w.mu.Lock()
	if k := (scopedKey{scope, key}); w.keys[k].claim == claim {
		delete(w.keys, k)
	}
	w.mu.Unlock()
}

// running reports whether the key is listed for a request with this
// fingerprint.
func (w *workingKeys) running(scope, key, fingerprint string) bool {
	w.mu.Lock()
	c, ok := w.keys[scopedKey{scope, key}]
	w.mu.Unlock()
	return ok && c.fingerprint == fingerprint
}

// unlist takes p's key off the list, if p put it there and it is still
// on it.
func (s *Service) unlist(p *Payment, claim string) {
	if p.listed {
		s.working.remove(p.Scope, p.Key, claim)
		p.listed = false
	}
}

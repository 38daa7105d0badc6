package store

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"runtime"
	"testing"
	"time"

	"paytwice/pay"
)

// TestReplayCacheEntryMemory measures the live heap the replay cache
// keeps per done key, with keys, scopes and responses shaped as a class's
// payments make them: each request's strings are its own allocations,
// which the cache may keep or copy. A full cache holds 100,000 of them
// (Options.ReplayCacheSize): at 0.63 KB each that was 63 MB of a lecture
// hall's live heap.
func TestReplayCacheEntryMemory(t *testing.T) {
	const n = 20_000
	perEntry := func() float64 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		c := newReplayCache(n)
		for i := range n {
			scope, key, r := classPayment(i)
			c.put(scope, key, r)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(c)
		return float64(after.HeapAlloc-before.HeapAlloc) / n
	}
	got := min(perEntry(), perEntry()) // the lower of two: a stray allocation elsewhere only adds
	t.Logf("%.0f bytes of live heap per cached key", got)
	if got > 500 {
		t.Errorf("%.0f bytes of live heap per cached key, want at most 500", got)
	}
}

// classPayment is the i-th payment of a class of 40 callers, as the
// handler hands it to the store: a scope built from the caller's token,
// a UUID-shaped key, the request's fingerprint and its 201.
func classPayment(i int) (scope, key string, r pay.Response) {
	tok := sha256.Sum256(fmt.Appendf(nil, "caller-%d", i%40))
	scope = "token:" + hex.EncodeToString(tok[:16])
	key = fmt.Sprintf("%08x-1f0c-4c1e-9a53-%012x", i, i*7919)
	ch := pay.Charge{ID: pay.NewID("ch_"), OrderID: key, AmountSatang: 1000, GatewayRef: pay.NewID("gw_"),
		CreatedAt: time.Date(2026, 12, 6, 15, 0, 0, i*1_000_000, time.UTC)}
	body := ch.ResponseBody()
	return scope, key, pay.Response{Fingerprint: pay.Fingerprint("POST", "/v1/payments", body), Status: 201, Body: body}
}

// TestReplayCacheAnswersWhatItWasGiven: packed into one string, an entry
// still gives back its fingerprint, status and body; a caller that
// changes the body it got does not change the next answer; the oldest key
// goes first; and the scopes kept once stay bounded.
func TestReplayCacheAnswersWhatItWasGiven(t *testing.T) {
	c := newReplayCache(2)
	var want [3]pay.Response
	var scopes, keys [3]string
	for i := range want {
		scopes[i], keys[i], want[i] = classPayment(i)
		c.put(scopes[i], keys[i], want[i])
	}
	if _, ok := c.get(scopes[0], keys[0]); ok {
		t.Error("the oldest key is still cached past the cache's size")
	}
	for i := 1; i < 3; i++ {
		got, ok := c.get(scopes[i], keys[i])
		if !ok || got.Fingerprint != want[i].Fingerprint || got.Status != want[i].Status || string(got.Body) != string(want[i].Body) {
			t.Fatalf("key %d: %+v, %v; want %+v", i, got, ok, want[i])
		}
		got.Body[0] = 'X'
		if again, _ := c.get(scopes[i], keys[i]); string(again.Body) != string(want[i].Body) {
			t.Errorf("key %d: a caller's change to its body reached the cache: %s", i, again.Body)
		}
	}
	if _, ok := c.get(scopes[2], keys[1]); ok {
		t.Error("a key answered under another caller's scope")
	}
	big := newReplayCache(4 * maxCachedScopes)
	for i := range 2*maxCachedScopes + 1 {
		big.put(fmt.Sprintf("session:%d", i), "k", want[1])
	}
	if len(big.scopes) > maxCachedScopes {
		t.Errorf("%d scopes kept, want at most %d", len(big.scopes), maxCachedScopes)
	}
	if got, ok := big.get("session:0", "k"); !ok || string(got.Body) != string(want[1].Body) {
		t.Error("a key cached before its scope was forgotten no longer answers")
	}
}

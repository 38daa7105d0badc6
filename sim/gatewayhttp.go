package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"paytwice/pay"
)

// GatewayHandler is the simulated payment provider served over HTTP, for
// an application under test (anyone's, in any language) to charge
// through. Like a real provider it is idempotent by the key the merchant
// sends, and it keeps its own books, so a test can count from outside
// how many times one order was really charged: the provider's ledger is
// the one witness the application cannot talk its way around.
//
//	POST /charges          Idempotency-Key header, {"order_id": "…", "amount": 100}
//	                       → 201 the new charge; the same key again → 200 the same charge
//	GET  /charges?order_id= → {"order_id", "charges": [...], "total": n, "pending": n, "pruned": n}
//	                       (the order's newest GatewayListLimit charges, of total)
//	GET  /ledger            → GatewayLedger: how many charges it holds and has pruned
//	GET  /switches, PUT /switches → GatewayHTTPSwitches
//	POST /reset             → an empty ledger, every switch off
//
// Its ledger lives in memory, bounded by GatewayHTTPMaxCharges: at the
// bound it forgets its oldest charge for each new one and counts those
// it forgot (Pruned), so it keeps taking charges and says how much of
// its history is gone. It is a test double for other applications, apart
// from the gateway paytwice's own payments go through. Who may charge,
// switch or reset is decided by whoever serves it (web/sim_gateway.go).
type GatewayHandler struct {
	now   func() time.Time
	sleep func(ctx context.Context, d time.Duration) error
	mux   *http.ServeMux

	mu      sync.Mutex
	byKey   map[string]GatewayHTTPCharge
	byOrder map[string][]string // order → keys, oldest first
	pending map[string]int      // order → charges waiting out their latency
	// oldest holds every key of byKey in the order charged, from
	// oldest[head] on: the next to prune when the ledger is full.
	oldest   []string
	head     int
	pruned   int64
	max      int
	switches GatewayHTTPSwitches
	base     GatewayBaseFaults
	// books, when set, is where the charges are kept (KeepIn): it decides
	// whether a key is new, and the maps above are its cache; tally is
	// what they said they hold when last asked.
	books GatewayBooks
	tally GatewayTally
}

// GatewayTally is what a gateway's books hold: the charges kept, and
// those pruned, oldest first, to keep them within their bound.
type GatewayTally struct {
	Held   int
	Pruned int64
}

// GatewayBooks keeps a gateway's charges beyond its process: a store that
// the gateway writes each charge through before answering, so that a
// restarted gateway, or the same gateway served by another process,
// knows every key it took.
type GatewayBooks interface {
	// Record keeps c unless a charge with its key is kept already, and
	// returns the charge that holds the key, whether this call kept it,
	// and what the books hold after it.
	Record(ctx context.Context, c GatewayHTTPCharge) (GatewayHTTPCharge, bool, GatewayTally, error)
	// ByOrder reads an order's newest limit charges, in the order they
	// were kept, and how many the order holds.
	ByOrder(ctx context.Context, orderID string, limit int) ([]GatewayHTTPCharge, int, error)
}

// GatewayClosed is GatewayBooks.Record's refusal of a charge because
// whoever serves the gateway closed it for good (a workshop's presenter
// removed its student): the charge is answered 410 Gone with Reason,
// nothing charged, where books that do not answer get a 503 asking for
// the same key again.
type GatewayClosed struct {
	Reason string
}

func (e *GatewayClosed) Error() string { return e.Reason }

// KeepIn makes b the gateway's books from now on: held are the charges b
// kept before (oldest first, at most the ledger's bound: the newest),
// and t what b holds in all. Call it before the gateway serves.
func (g *GatewayHandler) KeepIn(b GatewayBooks, held []GatewayHTTPCharge, t GatewayTally) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.books, g.tally = b, t
	for _, ch := range held {
		g.keepLocked(ch)
	}
}

// BooksSay sets what the gateway's books hold, as read from them: charges
// another process took through the same books count at once.
func (g *GatewayHandler) BooksSay(t GatewayTally) {
	g.mu.Lock()
	g.tally = t
	g.mu.Unlock()
}

// GatewayBaseFaults are failures every charge meets whatever the
// switches say, set by whoever serves the gateway rather than over its
// HTTP API: a room's presenter makes every student's gateway slow or
// forgetful at once, while a checker still flips each one's switches for
// its cases. Where both apply, the longer wait and either drop win.
type GatewayBaseFaults struct {
	// LatencyMS is how long every charge takes before it is recorded.
	LatencyMS int `json:"latency_ms"`
	// HoldAnswerMS is how long every answer is held once the charge is
	// recorded: a caller that waits less has been charged unknowingly.
	HoldAnswerMS int `json:"hold_answer_ms"`
	// DropFirstAnswer records each key's first charge and closes the
	// connection with no answer; the same key again gets the charge: a
	// caller that retries with its key recovers, one that does not
	// cannot know it paid.
	DropFirstAnswer bool `json:"drop_first_answer"`
}

// MaxBaseLatencyMS bounds GatewayBaseFaults' waits.
const MaxBaseLatencyMS = 10_000

// Validate says what is wrong with f.
func (f GatewayBaseFaults) Validate() error {
	if f.LatencyMS < 0 || f.LatencyMS > MaxBaseLatencyMS || f.HoldAnswerMS < 0 || f.HoldAnswerMS > MaxBaseLatencyMS {
		return fmt.Errorf("the gateway's latency and held answer are between 0 and %d ms", MaxBaseLatencyMS)
	}
	return nil
}

// SetBaseFaults sets the failures every charge meets (GatewayBaseFaults).
func (g *GatewayHandler) SetBaseFaults(f GatewayBaseFaults) {
	g.mu.Lock()
	g.base = f
	g.mu.Unlock()
}

// GatewayLedger is what GET /ledger says of the ledger as a whole.
type GatewayLedger struct {
	Charges int `json:"charges"`
	Max     int `json:"max_charges"`
	// Pruned counts the charges forgotten, oldest first, to make room
	// for new ones since the last reset: their orders' listings no longer
	// show them.
	Pruned int64 `json:"pruned"`
}

// GatewayHTTPSwitches are the HTTP gateway's failure modes.
type GatewayHTTPSwitches struct {
	// LatencyMS is how long a charge takes before it is recorded.
	LatencyMS int `json:"latency_ms"`
	// HoldAnswerMS is how long the answer to a charge is held after the
	// charge is recorded: a caller that gives up meanwhile has been
	// charged without learning it.
	HoldAnswerMS int `json:"hold_answer_ms"`
	// LatencyOrderID, when set, makes only that order's charges slow (and
	// their answers held), so a test can hold one payment in flight while
	// others go through.
	LatencyOrderID string `json:"latency_order_id"`
	// Timeout records the charge and then closes the connection with no
	// answer: the caller cannot know that it was charged.
	Timeout bool `json:"timeout"`
	// Refuse declines every charge with 402, charging nothing.
	Refuse bool `json:"refuse"`
}

// GatewayHTTPCharge is one charge in the HTTP gateway's ledger.
type GatewayHTTPCharge struct {
	ID           string    `json:"id"`
	Key          string    `json:"key"`
	OrderID      string    `json:"order_id"`
	AmountSatang int64     `json:"amount"`
	CreatedAt    time.Time `json:"created_at"`
}

// Bounds of the HTTP gateway.
const (
	GatewayHTTPMaxCharges = 100_000
	// GatewayListLimit bounds the charges one order's listing shows, the
	// newest: a checker's storm makes at most a few hundred per order.
	GatewayListLimit    = 1000
	maxGatewayLatencyMS = 60_000
	maxGatewayBody      = 4096
)

// NewGatewayHandler returns an empty gateway; now stamps its charges.
func NewGatewayHandler(now func() time.Time) *GatewayHandler {
	g := &GatewayHandler{now: now, sleep: pay.Sleep, mux: http.NewServeMux(), max: GatewayHTTPMaxCharges,
		byKey: map[string]GatewayHTTPCharge{}, byOrder: map[string][]string{}, pending: map[string]int{}}
	g.mux.HandleFunc("POST /charges", g.handleCharge)
	g.mux.HandleFunc("GET /charges", g.handleList)
	g.mux.HandleFunc("GET /ledger", g.handleLedger)
	g.mux.HandleFunc("GET /switches", g.handleGetSwitches)
	g.mux.HandleFunc("PUT /switches", g.handlePutSwitches)
	g.mux.HandleFunc("POST /reset", g.handleReset)
	return g
}

// SetMaxCharges bounds the ledger at n charges instead of
// GatewayHTTPMaxCharges; tests reach the bound with a few.
func (g *GatewayHandler) SetMaxCharges(n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.max = max(n, 1)
}

// Reset empties the ledger, forgets what it pruned and turns every switch
// off. Charges waiting out their latency are recorded after it. Books
// (KeepIn) keep their charges: a gateway with books is not reset.
func (g *GatewayHandler) Reset() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.byKey, g.byOrder = map[string]GatewayHTTPCharge{}, map[string][]string{}
	g.oldest, g.head, g.pruned = nil, 0, 0
	g.switches = GatewayHTTPSwitches{}
}

// Ledger says how many charges the ledger holds and has pruned: with
// books, what they said last.
func (g *GatewayHandler) Ledger() GatewayLedger {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.books != nil {
		return GatewayLedger{Charges: g.tally.Held, Max: g.max, Pruned: g.tally.Pruned}
	}
	return GatewayLedger{Charges: len(g.byKey), Max: g.max, Pruned: g.pruned}
}

func (g *GatewayHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) { g.mux.ServeHTTP(w, r) }

// Switches returns the gateway's current switches.
func (g *GatewayHandler) Switches() GatewayHTTPSwitches {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.switches
}

func gatewayJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func gatewayError(w http.ResponseWriter, status int, format string, args ...any) {
	gatewayJSON(w, status, map[string]string{"error": fmt.Sprintf(format, args...)})
}

func (g *GatewayHandler) handleCharge(w http.ResponseWriter, r *http.Request) {
	key, err := pay.ParseKey(r.Header.Values("Idempotency-Key"))
	if err != nil {
		gatewayError(w, http.StatusBadRequest, "Idempotency-Key: %s", pay.ErrorMessage(err))
		return
	}
	var req struct {
		OrderID      string `json:"order_id"`
		AmountSatang int64  `json:"amount"`
	}
	dec := json.NewDecoder(io.LimitReader(r.Body, maxGatewayBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		gatewayError(w, http.StatusBadRequest, "the body must be {\"order_id\": \"…\", \"amount\": 100}: %v", err)
		return
	}
	if req.OrderID == "" || len(req.OrderID) > pay.MaxOrderIDLen || req.AmountSatang <= 0 {
		gatewayError(w, http.StatusBadRequest, "order_id must be 1–%d bytes and amount a positive integer", pay.MaxOrderIDLen)
		return
	}
	g.mu.Lock()
	sw, base := g.switches, g.base
	g.mu.Unlock()
	if sw.Refuse {
		gatewayError(w, http.StatusPaymentRequired, "the card was declined")
		return
	}
	slowed := sw.LatencyOrderID == "" || sw.LatencyOrderID == req.OrderID
	latency, hold := base.LatencyMS, base.HoldAnswerMS
	if slowed {
		latency, hold = max(latency, sw.LatencyMS), max(hold, sw.HoldAnswerMS)
	}
	if latency > 0 {
		g.mu.Lock()
		g.pending[req.OrderID]++
		g.mu.Unlock()
		err := g.sleep(r.Context(), time.Duration(latency)*time.Millisecond)
		g.mu.Lock()
		if g.pending[req.OrderID]--; g.pending[req.OrderID] <= 0 {
			delete(g.pending, req.OrderID)
		}
		g.mu.Unlock()
		if err != nil {
			return // the caller left: nothing charged
		}
	}
	ch, fresh, err := g.record(r.Context(), key, req.OrderID, req.AmountSatang)
	if closed, ok := errors.AsType[*GatewayClosed](err); ok {
		// Not an outage: asking again changes nothing.
		gatewayError(w, http.StatusGone, "%s", closed.Reason)
		return
	}
	if err != nil {
		// Whether the books took the charge is unknown: the same key
		// again finds out, and never charges twice.
		gatewayError(w, http.StatusServiceUnavailable, "the gateway's books did not answer (%v): send the charge again with the same key", err)
		return
	}
	if !fresh && (ch.OrderID != req.OrderID || ch.AmountSatang != req.AmountSatang) {
		gatewayError(w, http.StatusUnprocessableEntity, "the key %q already charged order %s (%d)", key, ch.OrderID, ch.AmountSatang)
		return
	}
	if hold > 0 {
		if err := g.sleep(r.Context(), time.Duration(hold)*time.Millisecond); err != nil {
			return // the caller left: charged, and it will never know
		}
	}
	if sw.Timeout || (base.DropFirstAnswer && fresh) {
		// Charged, and the answer never leaves.
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				conn.Close()
				return
			}
		}
		panic(http.ErrAbortHandler)
	}
	status := http.StatusCreated
	if !fresh {
		status = http.StatusOK
	}
	gatewayJSON(w, status, ch)
}

// record charges under key once; fresh says whether this call did. With
// books, they decide, outside the lock: the books are idempotent by key
// themselves, so two requests of one key racing past the cache still
// make one charge.
func (g *GatewayHandler) record(ctx context.Context, key, orderID string, amount int64) (GatewayHTTPCharge, bool, error) {
	g.mu.Lock()
	if ch, ok := g.byKey[key]; ok {
		g.mu.Unlock()
		return ch, false, nil
	}
	books := g.books
	ch := GatewayHTTPCharge{ID: pay.NewID("gw_"), Key: key, OrderID: orderID, AmountSatang: amount, CreatedAt: g.now().UTC()}
	if books == nil {
		g.keepLocked(ch)
		g.mu.Unlock()
		return ch, true, nil
	}
	g.mu.Unlock()
	kept, fresh, tally, err := books.Record(ctx, ch)
	if err != nil {
		return GatewayHTTPCharge{}, false, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.tally = tally
	if _, ok := g.byKey[key]; !ok {
		g.keepLocked(kept)
	}
	return kept, fresh, nil
}

// keepLocked puts ch in the ledger's memory, its key not there yet; g.mu
// is held. A full ledger forgets its oldest charge first.
func (g *GatewayHandler) keepLocked(ch GatewayHTTPCharge) {
	if _, ok := g.byKey[ch.Key]; ok {
		return
	}
	for len(g.byKey) >= g.max {
		g.pruneOldestLocked()
	}
	g.byKey[ch.Key] = ch
	g.byOrder[ch.OrderID] = append(g.byOrder[ch.OrderID], ch.Key)
	g.oldest = append(g.oldest, ch.Key)
}

// pruneOldestLocked forgets the oldest charge; g.mu is held. Charges are
// pruned in the order they were made, so the one forgotten is also the
// first of its order's keys.
func (g *GatewayHandler) pruneOldestLocked() {
	key := g.oldest[g.head]
	g.oldest[g.head] = ""
	g.head++
	if g.head > len(g.oldest)/2 { // keep the queue's array from growing without end
		g.oldest, g.head = append([]string(nil), g.oldest[g.head:]...), 0
	}
	ch := g.byKey[key]
	delete(g.byKey, key)
	if keys := g.byOrder[ch.OrderID]; len(keys) > 1 {
		g.byOrder[ch.OrderID] = keys[1:]
	} else {
		delete(g.byOrder, ch.OrderID)
	}
	g.pruned++
}

func (g *GatewayHandler) handleList(w http.ResponseWriter, r *http.Request) {
	order := r.URL.Query().Get("order_id")
	if order == "" {
		gatewayError(w, http.StatusBadRequest, "give the order: GET /charges?order_id=…")
		return
	}
	g.mu.Lock()
	keys := g.byOrder[order]
	total := len(keys)
	keys = keys[max(len(keys)-GatewayListLimit, 0):]
	charges := make([]GatewayHTTPCharge, 0, len(keys))
	for _, k := range keys {
		charges = append(charges, g.byKey[k])
	}
	pending, pruned, books := g.pending[order], g.pruned, g.books
	g.mu.Unlock()
	if books != nil {
		// The books hold what other processes serving this gateway
		// charged too.
		kept, n, err := books.ByOrder(r.Context(), order, GatewayListLimit)
		if err != nil {
			gatewayError(w, http.StatusServiceUnavailable, "the gateway's books did not answer: %v", err)
			return
		}
		charges, total = append(charges[:0], kept...), n
		g.mu.Lock()
		pruned = g.tally.Pruned
		g.mu.Unlock()
	}
	gatewayJSON(w, http.StatusOK, map[string]any{"order_id": order, "charges": charges, "total": total, "pending": pending, "pruned": pruned})
}

func (g *GatewayHandler) handleLedger(w http.ResponseWriter, r *http.Request) {
	gatewayJSON(w, http.StatusOK, g.Ledger())
}

func (g *GatewayHandler) handleReset(w http.ResponseWriter, r *http.Request) {
	g.Reset()
	gatewayJSON(w, http.StatusOK, g.Ledger())
}

func (g *GatewayHandler) handleGetSwitches(w http.ResponseWriter, r *http.Request) {
	gatewayJSON(w, http.StatusOK, g.Switches())
}

func (g *GatewayHandler) handlePutSwitches(w http.ResponseWriter, r *http.Request) {
	var sw GatewayHTTPSwitches
	dec := json.NewDecoder(io.LimitReader(r.Body, maxGatewayBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&sw); err != nil {
		gatewayError(w, http.StatusBadRequest, "the body must be the switches as JSON: %v", err)
		return
	}
	if sw.LatencyMS < 0 || sw.LatencyMS > maxGatewayLatencyMS {
		gatewayError(w, http.StatusBadRequest, "latency_ms must be between 0 and %d, not %s", maxGatewayLatencyMS, strconv.Itoa(sw.LatencyMS))
		return
	}
	if sw.HoldAnswerMS < 0 || sw.HoldAnswerMS > maxGatewayLatencyMS {
		gatewayError(w, http.StatusBadRequest, "hold_answer_ms must be between 0 and %d, not %s", maxGatewayLatencyMS, strconv.Itoa(sw.HoldAnswerMS))
		return
	}
	g.mu.Lock()
	g.switches = sw
	g.mu.Unlock()
	gatewayJSON(w, http.StatusOK, sw)
}

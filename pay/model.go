package pay

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"
	"time"
)

// Key statuses. A key is "started" from its claim until its response is
// saved; "done" keys replay their saved response.
const (
	StatusStarted = "started"
	StatusDone    = "done"
)

// PaidStatus is the status a payment's 201 carries: the one answer that
// reports a charge. Saved responses keep their HTTP status as data.
const PaidStatus = 201

// KeyRow is one row of the idempotency key table.
type KeyRow struct {
	Scope          string    `json:"scope"`
	Key            string    `json:"key"`
	Method         string    `json:"method"`
	Path           string    `json:"path"`
	Fingerprint    string    `json:"fingerprint"`
	OrderID        string    `json:"order_id"`
	AmountSatang   int64     `json:"amount_satang"`
	Status         string    `json:"status"`
	ResponseStatus int       `json:"response_status,omitempty"`
	ResponseBody   []byte    `json:"-"`
	CreatedAt      time.Time `json:"created_at"`
	LockedAt       time.Time `json:"locked_at"`
	CompletedAt    time.Time `json:"completed_at,omitzero"`
	// Claim is the fencing token of the claim that holds the key.
	Claim string `json:"-"`
	// ChargeKey is the key its charge is recorded under; "" means Key.
	ChargeKey string `json:"-"`
}

// ChargeKeyOrKey is the key this row's charge is recorded under and the
// gateway was called with.
func (k KeyRow) ChargeKeyOrKey() string {
	if k.ChargeKey != "" {
		return k.ChargeKey
	}
	return k.Key
}

// Response is a saved response: what a replay sends back.
type Response struct {
	Fingerprint string
	Status      int
	Body        []byte
}

// Charge is money taken from a customer, recorded locally after the
// gateway confirmed it.
type Charge struct {
	ID           string    `json:"charge_id"`
	Scope        string    `json:"-"`
	Key          string    `json:"-"`
	OrderID      string    `json:"order_id"`
	AmountSatang int64     `json:"amount_satang"`
	GatewayRef   string    `json:"gateway_ref"`
	CreatedAt    time.Time `json:"created_at"`
}

// responseBodyFixedLen is the most room a plain ResponseBody needs
// besides its three strings: its names and punctuation (96), an int64
// (at most 20) and a time of years 0 to 9999 (24 bytes in milliseconds,
// but time.AppendFormat writes all nine digits of the fraction before it
// trims them: 29 for a moment).
const responseBodyFixedLen = 96 + 20 + 29

// ResponseBody is the JSON body of the 201 that reports this charge. The
// handler and the sweeper both build it here so that a swept key replays
// exactly what a live request would have answered.
func (c Charge) ResponseBody() []byte {
	created := c.CreatedAt.UTC().Truncate(time.Millisecond)
	if plainJSONString(c.ID) && plainJSONString(c.OrderID) && plainJSONString(c.GatewayRef) && created.Year() >= 0 && created.Year() <= 9999 {
		// What json.Marshal writes below, without its reflection: no
		// string here is one it would escape. Sized for the longest such
		// body, so that it is one allocation that fits: the replay cache
		// keeps it, and a body grown by append kept its 352 bytes of
		// room for some 210 of JSON.
		b := make([]byte, 0, responseBodyFixedLen+len(c.ID)+len(c.OrderID)+len(c.GatewayRef))
		b = append(b, `{"charge_id":"`...)
		b = append(b, c.ID...)
		b = append(b, `","status":"paid","order_id":"`...)
		b = append(b, c.OrderID...)
		b = append(b, `","amount_satang":`...)
		b = strconv.AppendInt(b, c.AmountSatang, 10)
		b = append(b, `,"gateway_ref":"`...)
		b = append(b, c.GatewayRef...)
		b = append(b, `","created_at":"`...)
		b = created.AppendFormat(b, time.RFC3339Nano)
		return append(b, `"}`...)
	}
	return c.marshalResponseBody(created)
}

// marshalResponseBody is ResponseBody through json.Marshal.
func (c Charge) marshalResponseBody(created time.Time) []byte {
	b, _ := json.Marshal(struct {
		ID           string `json:"charge_id"`
		Status       string `json:"status"`
		OrderID      string `json:"order_id"`
		AmountSatang int64  `json:"amount_satang"`
		GatewayRef   string `json:"gateway_ref"`
		CreatedAt    string `json:"created_at"`
	}{c.ID, "paid", c.OrderID, c.AmountSatang, c.GatewayRef, created.Format(time.RFC3339Nano)})
	return b
}

// GatewayCharge is a row of the simulated gateway's ledger.
type GatewayCharge struct {
	Key          string    `json:"key"`
	ID           string    `json:"id"`
	OrderID      string    `json:"order_id"`
	AmountSatang int64     `json:"amount_satang"`
	CreatedAt    time.Time `json:"created_at"`
}

// WorkshopTally is what a workshop gateway's books hold: the charges
// kept, and those pruned, oldest first, to keep each student's books
// within their bound. Held plus Pruned is every charge the gateway took.
type WorkshopTally struct {
	Held   int   `json:"held"`
	Pruned int64 `json:"pruned"`
}

// NewID returns prefix followed by 24 random hex characters.
func NewID(prefix string) string {
	var raw [12]byte
	_, _ = rand.Read(raw[:]) // crypto/rand.Read never fails on supported platforms
	var h [24]byte
	hex.Encode(h[:], raw[:])
	var b strings.Builder // one allocation, where prefix + hex took three
	b.Grow(len(prefix) + len(h))
	b.WriteString(prefix)
	b.Write(h[:])
	return b.String()
}

// NewToken returns 128 random bits in hex: a claim's fencing token.
func NewToken() string { return randomHex(16) }

// randomHex returns n (at most 16) random bytes in hex.
func randomHex(n int) string {
	var b [16]byte
	_, _ = rand.Read(b[:n]) // crypto/rand.Read never fails on supported platforms
	var h [32]byte
	return string(hex.AppendEncode(h[:0], b[:n]))
}

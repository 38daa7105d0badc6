package sim

import (
	"context"
	"errors"
	"time"

	"paytwice/pay"
)

// Ledger is the gateway's persistent memory. store.DB implements it in a
// table of its own.
type Ledger interface {
	RecordGatewayCharge(ctx context.Context, g pay.GatewayCharge) (pay.GatewayCharge, bool, error)
	LookupGatewayCharge(ctx context.Context, key string) (pay.GatewayCharge, bool, error)
}

// Gateway is an in-process fake payment provider. Like a real one it is
// idempotent by the key the merchant passes: charging the same key twice
// returns the first charge. It is always called outside any transaction
// of ours, because it stands for a network call to another company.
type Gateway struct {
	ledger Ledger
	now    func() time.Time
	// sleep waits for d or until ctx ends; tests replace it.
	sleep func(ctx context.Context, d time.Duration) error
}

// NewGateway returns a gateway that keeps its charges in ledger.
func NewGateway(ledger Ledger, now func() time.Time) *Gateway {
	g := &Gateway{ledger: ledger, now: now, sleep: pay.Sleep}
	return g
}

// ChargeWith takes amountSatang for orderID under the merchant's key, with
// the switches sw: a request that drew its faults once (FaultPlan.Draw)
// charges with them.
func (g *Gateway) ChargeWith(ctx context.Context, sw pay.GatewayFaults, key, orderID string, amountSatang int64) (pay.GatewayCharge, error) {
	if sw.LatencyMS > 0 {
		if err := g.sleep(ctx, time.Duration(sw.LatencyMS)*time.Millisecond); err != nil {
			// The request never reached the provider's ledger: nothing charged,
			// but the caller cannot be sure of that either.
			return pay.GatewayCharge{}, pay.ErrGatewayTimeout
		}
	}
	switch {
	case sw.Decline:
		return pay.GatewayCharge{}, pay.ErrDeclined
	case sw.Error:
		return pay.GatewayCharge{}, pay.ErrGatewayFailure
	}
	rec, _, err := g.ledger.RecordGatewayCharge(ctx, pay.GatewayCharge{
		Key: key, ID: pay.NewID("gw_"), OrderID: orderID, AmountSatang: amountSatang, CreatedAt: g.now(),
	})
	if err != nil {
		return pay.GatewayCharge{}, errors.Join(pay.ErrGatewayTimeout, err)
	}
	if sw.Timeout {
		return pay.GatewayCharge{}, pay.ErrGatewayTimeout
	}
	return rec, nil
}

// With is the gateway as the protocol sees it, charging under the
// switches sw: a request that drew its faults once charges with them.
func (g *Gateway) With(sw pay.GatewayFaults) pay.Gateway { return switched{g, sw} }

type switched struct {
	g  *Gateway
	sw pay.GatewayFaults
}

func (s switched) Charge(ctx context.Context, key, orderID string, amountSatang int64) (pay.GatewayCharge, error) {
	return s.g.ChargeWith(ctx, s.sw, key, orderID, amountSatang)
}

func (s switched) Lookup(ctx context.Context, key string) (pay.GatewayCharge, bool, error) {
	return s.g.Lookup(ctx, key)
}

// Lookup asks whether the gateway holds a charge for key.
func (g *Gateway) Lookup(ctx context.Context, key string) (pay.GatewayCharge, bool, error) {
	return g.ledger.LookupGatewayCharge(ctx, key)
}

// SetSleep replaces how the gateway waits out its latency; tests use it to
// hold a charge in flight for exactly as long as they need.
func (g *Gateway) SetSleep(sleep func(ctx context.Context, d time.Duration) error) { g.sleep = sleep }

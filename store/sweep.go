package store

import (
	"context"
	"time"

	"paytwice/pay"
)

// GatewayLookup asks the payment provider whether it holds a charge for
// the scope's charge key. It is how the sweeper learns the outcome of a
// request that stopped after calling the gateway.
type GatewayLookup func(ctx context.Context, scope, chargeKey string) (pay.GatewayCharge, bool, error)

// SweepOutcome is what the sweeper did with one stuck key.
type SweepOutcome struct {
	Row     pay.KeyRow
	Charged bool       // the gateway had charged: the key is now done with a 201
	Charge  pay.Charge // the charge recorded, when Charged
	Err     error      // the key could not be closed this time; it stays started
}

// Sweep closes the keys that have been started for longer than
// lockTimeout. For each it asks the gateway: when the charge happened, it
// records the charge and marks the key done with the 201 a live request
// would have sent; when it did not, it releases the key so that a retry
// runs afresh. Either way the key stops answering 409.
//
// running reports whether a claim's request is still at work in this
// process; such a key is never closed, whatever the clock says. The
// sweeper acts on the claim it read: if the request finished, or someone
// else took the key, between the read and the close, the close does
// nothing.
func (db *DB) Sweep(ctx context.Context, lockTimeout time.Duration, lookup GatewayLookup, running func(claim string) bool) ([]SweepOutcome, error) {
	stuck, err := db.StartedBefore(ctx, db.now().Add(-lockTimeout))
	if err != nil {
		return nil, err
	}
	var out []SweepOutcome
	for _, row := range stuck {
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
		if running != nil && running(row.Claim) {
			continue
		}
		o := SweepOutcome{Row: row}
		g, charged, err := lookup(ctx, row.Scope, row.ChargeKeyOrKey())
		switch {
		case err != nil:
			o.Err = err
		case charged:
			o.Charged = true
			o.Charge = pay.Charge{ID: pay.NewID("ch_"), Scope: row.Scope, Key: row.ChargeKeyOrKey(), OrderID: g.OrderID,
				AmountSatang: g.AmountSatang, GatewayRef: g.ID, CreatedAt: db.now()}
			var done Completed
			done, o.Err = db.Complete(ctx, Completion{ClaimRequest: claimRequestOf(row), Claim: row.Claim,
				Status: pay.PaidStatus, Body: o.Charge.ResponseBody(), Charge: &o.Charge})
			if o.Err == nil && done.ClaimLost {
				continue // the request itself finished meanwhile: nothing to report
			}
		default:
			var released bool
			released, o.Err = db.Release(ctx, row.Scope, row.Key, row.Claim)
			if o.Err == nil && !released {
				continue // the request itself finished meanwhile
			}
		}
		out = append(out, o)
	}
	return out, nil
}

// claimRequest is the request a key row was claimed for.
func claimRequestOf(k pay.KeyRow) ClaimRequest {
	return ClaimRequest{Scope: k.Scope, Key: k.Key, Method: k.Method, Path: k.Path, Fingerprint: k.Fingerprint,
		OrderID: k.OrderID, AmountSatang: k.AmountSatang, ChargeKey: k.ChargeKey}
}

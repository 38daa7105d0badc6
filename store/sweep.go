package store

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// GatewayLookup asks the payment provider whether it holds a charge for
// the scope's key. It is how the sweeper learns the outcome of a request
// that stopped after calling the gateway.
type GatewayLookup func(ctx context.Context, scope, key string) (GatewayCharge, bool, error)

// SweepOutcome is what the sweeper did with one stuck key.
type SweepOutcome struct {
	Row     KeyRow
	Charged bool   // the gateway had charged: the key is now done with a 201
	Charge  Charge // the charge recorded, when Charged
	Err     error  // the key could not be closed this time; it stays started
}

// Sweep closes the keys that have been started for longer than
// lockTimeout. For each it asks the gateway: when the charge happened, it
// records the charge and marks the key done with the 201 a live request
// would have sent; when it did not, it releases the key so that a retry
// runs afresh. Either way the key stops answering 409.
func (db *DB) Sweep(ctx context.Context, lockTimeout time.Duration, lookup GatewayLookup) ([]SweepOutcome, error) {
	stuck, err := db.StartedBefore(ctx, db.now().Add(-lockTimeout))
	if err != nil {
		return nil, err
	}
	var out []SweepOutcome
	for _, row := range stuck {
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
		o := SweepOutcome{Row: row}
		g, charged, err := lookup(ctx, row.Scope, row.Key)
		switch {
		case err != nil:
			o.Err = err
		case charged:
			o.Charged = true
			o.Charge = Charge{ID: NewID("ch_"), Scope: row.Scope, Key: row.Key, OrderID: g.OrderID,
				AmountSatang: g.AmountSatang, GatewayRef: g.ID, CreatedAt: db.now()}
			_, o.Err = db.Complete(ctx, Completion{Scope: row.Scope, Key: row.Key, Fingerprint: row.Fingerprint,
				Status: http.StatusCreated, Body: o.Charge.ResponseBody(), Charge: &o.Charge})
		default:
			var released bool
			released, o.Err = db.Release(ctx, row.Scope, row.Key)
			if o.Err == nil && !released {
				o.Err = ErrNotStarted
			}
		}
		if errors.Is(o.Err, ErrNotStarted) {
			continue // the request itself finished meanwhile: nothing to report
		}
		out = append(out, o)
	}
	return out, nil
}

package web

import (
	"context"
	"sync"

	"paytwice/pay"
)

// bookedCharges answers stillBooked's question, whether the books hold a
// charge made before a reset, once per charge and reset generation: a
// request's events come in several batches, each naming its charge, and
// without it every event of a charge the books do not hold looked it up
// again. The answer cannot change within a generation: a charge is in the
// books before any event names it, and only a reset empties them, which
// starts the next generation. A look-up that fails is not remembered.
type bookedCharges struct {
	lookup func(ctx context.Context, scope, orderID string) ([]pay.Charge, error)

	mu sync.Mutex
	// gen is the reset generation the answers were given in; held is,
	// for each charge looked up (by scope and id), whether the books
	// hold it.
	gen  uint64
	held map[bookedCharge]bool
}

// bookedCharge names a charge looked up.
type bookedCharge struct{ scope, id string }

// maxBookedCharges bounds the answers kept: past it, they are forgotten
// and looked up again.
const maxBookedCharges = 4096

func newBookedCharges(lookup func(ctx context.Context, scope, orderID string) ([]pay.Charge, error)) *bookedCharges {
	return &bookedCharges{lookup: lookup, held: map[bookedCharge]bool{}}
}

// holds reports whether the books hold charge of order orderID in scope,
// asked in reset generation gen.
func (b *bookedCharges) holds(ctx context.Context, gen uint64, scope, orderID, charge string) (bool, error) {
	key := bookedCharge{scope, charge}
	b.mu.Lock()
	if b.gen != gen {
		b.gen = gen
		clear(b.held)
	}
	held, known := b.held[key]
	b.mu.Unlock()
	if known {
		return held, nil
	}
	charges, err := b.lookup(ctx, scope, orderID)
	if err != nil {
		return false, err
	}
	for _, c := range charges {
		if c.ID == charge {
			held = true
			break
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.gen == gen {
		if len(b.held) >= maxBookedCharges {
			clear(b.held)
		}
		b.held[key] = held
	}
	return held, nil
}

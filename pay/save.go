package pay

// SaveTx is one transaction of a backend's Complete: the few reads and
// writes the save rule is made of. Each acts on the key (or the charge
// key) of the completion it is given.
type SaveTx interface {
	// MarkDone sets the key done with c's answer if c's claim still holds
	// it, and reports whether it did.
	MarkDone(c Completion) (bool, error)
	// InsertCharge records c's charge under c's charge key unless a
	// charge is recorded there already, and reports whether it did.
	InsertCharge(c Completion) (bool, error)
	// RecordedCharge reads the charge recorded under c's charge key.
	RecordedCharge(c Completion) (Charge, error)
	// SetBody replaces the saved response body of c's key.
	SetBody(c Completion, body []byte) error
	// InsertDone writes c's key, done with r, unless the key exists, and
	// reports whether it did.
	InsertDone(c Completion, r Response) (bool, error)
	// Key reads c's key; found is false when there is none.
	Key(c Completion) (row KeyRow, found bool, err error)
}

// SaveCompletion is the rule both backends save a completion by, inside
// the transaction tx; it returns what was saved and whether the key now
// replays that answer (a backend with a replay cache may cache it).
//
// The key is marked done only through the claim's fencing token, so a
// completion acts only on the claim it holds. When the claim is gone (a
// sweeper released the key, a reset emptied the table), the charge is
// still recorded: money the gateway took is never dropped. Then the key
// row is written again, done with this answer, if nobody holds it and a
// charge was taken, so that the key remembers the money; if the key is
// done with the same request's answer (a sweeper closed it with this very
// charge), that answer is sent; otherwise the key is someone else's and is
// left alone.
//
// When the key's charge is already recorded with the same gateway
// reference (a key pruned while its charge stayed, then retried late,
// reaches the same gateway charge again), it is not recorded twice: the
// key is closed with that charge's 201, so neither the request nor the
// sweeper is stuck on the UNIQUE constraint. Another gateway reference is
// ErrChargeDiffers.
func SaveCompletion(tx SaveTx, c Completion) (out Completed, replays bool, err error) {
	out = Completed{Response: Response{Fingerprint: c.Fingerprint, Status: c.Status, Body: c.Body}}
	marked, err := tx.MarkDone(c)
	if err != nil {
		return Completed{}, false, err
	}
	out.ClaimLost = !marked
	if c.Charge != nil {
		inserted, err := tx.InsertCharge(c)
		if err != nil {
			return Completed{}, false, err
		}
		if !inserted {
			existing, err := tx.RecordedCharge(c)
			if err != nil {
				return Completed{}, false, err
			}
			if existing.GatewayRef != c.Charge.GatewayRef {
				return Completed{}, false, ErrChargeDiffers
			}
			out.ChargeExisted = true
			if c.Status == PaidStatus {
				out.Body = existing.ResponseBody()
				if marked {
					if err := tx.SetBody(c, out.Body); err != nil {
						return Completed{}, false, err
					}
				}
			}
		}
	}
	if marked {
		return out, true, nil
	}
	if c.Charge != nil {
		written, err := tx.InsertDone(c, out.Response)
		if err != nil || written {
			return out, written, err
		}
	}
	row, found, err := tx.Key(c)
	switch {
	case err != nil:
		return Completed{}, false, err
	case found && row.Status == StatusDone && row.Fingerprint == c.Fingerprint:
		out.Response = Response{Fingerprint: row.Fingerprint, Status: row.ResponseStatus, Body: row.ResponseBody}
		return out, true, nil
	}
	return out, false, nil
}

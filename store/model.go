package store

import (
	"time"

	"paytwice/pay"
)

// ErrClosed is returned by operations on a closed DB.
var ErrClosed = &pay.Error{Code: pay.EUNAVAILABLE, Message: "The database is closed."}

// ErrChargeDiffers means the key already holds a charge with another
// gateway reference: a completion never answers with another charge.
var ErrChargeDiffers = &pay.Error{Code: pay.EINTERNAL, Message: "This key already holds a different charge; nothing was recorded twice."}

func toMillis(t time.Time) int64 { return t.UnixMilli() }

func fromMillis(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

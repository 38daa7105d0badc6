package store

import (
	"time"

	"paytwice/pay"
)

// ErrClosed is returned by operations on a closed DB.
var ErrClosed = &pay.Error{Code: pay.EUNAVAILABLE, Message: "The database is closed."}

func toMillis(t time.Time) int64 { return t.UnixMilli() }

func fromMillis(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

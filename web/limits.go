package web

import (
	"net/http"
	"time"
)

// DefaultBodyTimeout is how long a request may take to send its body
// once its headers have arrived. A payment body is a few dozen bytes; a
// client that trickles one byte at a time would otherwise hold a
// connection and a goroutine for as long as it liked.
const DefaultBodyTimeout = 10 * time.Second

// bodyDeadline gives every request that has a body d to send all of it,
// through a read deadline on its connection; a body that is late fails
// to read and the request gets a 4xx. net/http lifts the deadline itself
// once the body has been read to its end (it starts its own background
// read with none), so a long handler, such as a payment waiting at a slow
// gateway, keeps its connection and its context. Requests without a body,
// /events among them, are left alone: a stream never gets a read
// deadline, and its writes have their own (web/events.go).
func bodyDeadline(d time.Duration, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody {
			// An error means the connection takes no deadlines (some
			// HTTP/2 setups); the body is then bounded only by its size.
			_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(d))
		}
		next.ServeHTTP(w, r)
	})
}

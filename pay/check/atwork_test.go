package check_test

import (
	"context"
	"net/http"
	"sync"
	"time"
)

// atWork counts the requests a test's server is answering, so that a
// retry's wait can end when the request it waits for has ended (a key
// still at work answers 409 and Retry-After: 1) instead of a second
// later. The wait is what the checker's RetryWait is for.
type atWork struct {
	mu    sync.Mutex
	n     int
	ended chan struct{} // closed and replaced each time n falls to 0
}

func (w *atWork) counting(h http.Handler) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		w.mu.Lock()
		w.n++
		w.mu.Unlock()
		defer func() {
			w.mu.Lock()
			w.n--
			if w.n == 0 && w.ended != nil {
				close(w.ended)
				w.ended = nil
			}
			w.mu.Unlock()
		}()
		h.ServeHTTP(rw, r)
	})
}

// waitIdle waits until no request is at work, at most d.
func (w *atWork) waitIdle(ctx context.Context, d time.Duration) error {
	w.mu.Lock()
	if w.n == 0 {
		w.mu.Unlock()
		return nil
	}
	if w.ended == nil {
		w.ended = make(chan struct{})
	}
	ended := w.ended
	w.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ended:
		return nil
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

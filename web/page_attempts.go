package web

import (
	"net/http"
	"strconv"
	"sync"

	"github.com/labstack/echo/v4"
)

// What the checkout page's payment requests carry besides the payment:
// its session, which of its attempts and clicks a request is, and the
// browser's own copies of an attempt, counted.

// pageSessionHeader carries the checkout page's session on its payment
// requests, which it sends without cookies (credentials: "omit").
// pageAttemptHeader names one attempt of the page, so that a copy the
// browser sends again by itself is seen as one.
const (
	pageSessionHeader = "Paytwice-Session"
	pageAttemptHeader = "Paytwice-Attempt"
	// pageClickHeader says which click of the page (and which retry of
	// it: "2.1") an attempt is, for the step bar.
	pageClickHeader = "Paytwice-Click"
	// attemptCopiesHeader answers how many times this attempt reached
	// the server when that is more than once.
	attemptCopiesHeader = "Paytwice-Attempt-Copies"
)

// freshConnectionPerPayment makes every payment attempt of the checkout
// page travel on a connection of its own. Chromium silently sends a POST
// again when a reused keep-alive connection closes unanswered, so a
// dropped connection or a lost response would reach the server twice and
// never reach the page. Requests without cookies get a connection pool of
// their own in the browser; answering each with Connection: close leaves
// that pool empty, so the next attempt opens a fresh connection, and a
// fresh connection is never re-sent. The session comes in the header
// instead of the cookie, so the payment keeps the browser's scope.
//
// Should the browser send an attempt again all the same, the copy is
// named on the timeline (resentNote) and the page is told in its answer.
func freshConnectionPerPayment(attempts *attemptLog) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			r := c.Request()
			if r.URL.Path != paymentsPath {
				return next(c)
			}
			if id := r.Header.Get(pageSessionHeader); validSessionID(id) {
				if _, err := r.Cookie(sessionCookie); err != nil {
					r.AddCookie(&http.Cookie{Name: sessionCookie, Value: id})
				}
				c.Response().Header().Set("Connection", "close")
			}
			if id := r.Header.Get(pageAttemptHeader); validSessionID(id) {
				// Counted per scope: another caller who sends this page's
				// attempt id has made an attempt of its own, not a copy of
				// this one.
				if n := attempts.see(callerScope(r), id); n > 1 {
					c.Response().Header().Set(attemptCopiesHeader, strconv.Itoa(n))
					c.Set(attemptCopiesHeader, n)
				}
			}
			return next(c)
		}
	}
}

// resentNote marks, on the timeline, a request that is the browser's own
// copy of an attempt the server had already seen.
func resentNote(c echo.Context) string {
	if n, ok := c.Get(attemptCopiesHeader).(int); ok {
		return " · copy " + strconv.Itoa(n) + " of one attempt, sent again by the browser itself"
	}
	return ""
}

// attemptLog remembers the last page attempts the server saw, a bounded
// number of them, each under the scope that sent it.
type attemptLog struct {
	mu    sync.Mutex
	seen  map[string]int
	order []string
}

const attemptLogSize = 4096

// see counts one arrival of scope's attempt id and returns how many
// there were.
func (l *attemptLog) see(scope, id string) int {
	id = scope + "\x00" + id
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen == nil {
		l.seen = make(map[string]int, attemptLogSize)
	}
	n := l.seen[id] + 1
	if n == 1 {
		l.order = append(l.order, id)
		if len(l.order) > attemptLogSize {
			delete(l.seen, l.order[0])
			l.order = l.order[1:]
		}
	}
	l.seen[id] = n
	return n
}

// pageClick reads which click of the checkout page a request is ("2", or
// "2.1" for its first retry); "" when the header is missing or is not that.
func pageClick(r *http.Request) string {
	v := r.Header.Get(pageClickHeader)
	if len(v) == 0 || len(v) > 9 {
		return ""
	}
	dots := 0
	for i, c := range v {
		switch {
		case c >= '0' && c <= '9':
		case c == '.' && i > 0 && i < len(v)-1 && dots == 0:
			dots++
		default:
			return ""
		}
	}
	return v
}

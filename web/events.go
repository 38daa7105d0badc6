package web

import (
	"errors"
	"strconv"

	"github.com/labstack/echo/v4"

	"paytwice/pay"
	"paytwice/web/board"
)

// DefaultMaxStreams is how many event streams a server keeps open at
// once unless configured otherwise: a classroom with a tab or two each.
const DefaultMaxStreams = 500

// streamRetryAfter is what a viewer turned away is asked to wait, in
// seconds.
const streamRetryAfter = 10

// handleEvents is GET /events: the live panels' Server-Sent Events
// stream (board.Stream). Beyond Config.MaxStreams open streams a new one gets 503 and
// Retry-After; an address that opens streams faster than a page ever
// reconnects gets 429 (newStreamLimiter).
func (s *Server) handleEvents(c echo.Context) error {
	r := c.Request()
	if s.streamsEnded.Load() {
		c.Response().Header().Set("Retry-After", strconv.Itoa(streamRetryAfter))
		return writeProblem(c, pay.Errorf(pay.EUNAVAILABLE, "The server is shutting down."))
	}
	if wait := s.streamOpens.take(s.clientIP(r)); wait > 0 {
		c.Response().Header().Set("Retry-After", strconv.Itoa(int(wait.Seconds())+1))
		return writeProblem(c, pay.Errorf(pay.EBUSY, "This address has opened the live view more than %d times in a short while. The page works without its live panels; it reconnects by itself.", streamOpenBurst))
	}
	err := s.live().Stream(c.Response(), r, s.cfg.MaxStreams)
	switch {
	case errors.Is(err, board.ErrClosed):
		c.Response().Header().Set("Retry-After", strconv.Itoa(streamRetryAfter))
		return writeProblem(c, pay.Errorf(pay.EUNAVAILABLE, "The server is shutting down."))
	case errors.Is(err, board.ErrFull):
		c.Response().Header().Set("Retry-After", strconv.Itoa(streamRetryAfter))
		return writeProblem(c, pay.Errorf(pay.EUNAVAILABLE, "This server already has %d live views open, its limit (-max-streams). The page works without its live panels; it reconnects by itself.", s.cfg.MaxStreams))
	}
	return err
}

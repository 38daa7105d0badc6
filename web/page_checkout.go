package web

import (
	"crypto/rand"
	"math/big"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"paytwice/pay"
	"paytwice/views"
)

// The live pages' defaults.
const (
	defaultAmountSatang = 129900 // ฿1,299.00, the article's example
	backoffBaseMS       = 500
	backoffCapMS        = 8000
	backoffRetries      = 5
	attemptTimeoutMS    = 10000 // without an answer, the page gives an attempt up
)

// liveRoutes registers the live pages and their event stream.
func (s *Server) liveRoutes(e *echo.Echo) {
	e.GET("/", s.handleCheckout)
	e.GET("/board", s.handleBoard)
	e.GET("/favicon.ico", handleFavicon)
}

// handleFavicon answers the browsers (and tools) that ask for
// /favicon.ico whatever the page's link says: the icon is an SVG.
func handleFavicon(c echo.Context) error {
	c.Response().Header().Set("Cache-Control", "public, max-age=86400")
	return c.Redirect(http.StatusMovedPermanently, "/static/favicon.svg")
}

// handleCheckout is GET /: the checkout card, the switches and the live
// panels. The page gives the browser a session, so its payments have a
// scope of their own. ?backoff_ms=n shrinks the retry policy's base delay
// and ?attempt_ms=n the time an attempt waits for its answer (tests use
// them so that a retry or a time-out does not take seconds); they change
// nothing on the server.
func (s *Server) handleCheckout(c echo.Context) error {
	r := c.Request()
	lesson, err := s.pageLesson(c, false) // ?lesson=<chapter>; an unknown one is a 404
	if err != nil {
		return err
	}
	scope := ensureSession(c.Response(), r)
	session := ""
	if ck, err := r.Cookie(sessionCookie); err == nil {
		session = ck.Value // for the page's payments, sent without cookies (freshConnectionPerPayment)
	}
	base := backoffBaseMS
	if v, err := strconv.Atoi(c.QueryParam("backoff_ms")); err == nil && v >= 1 && v <= backoffBaseMS {
		base = v
	}
	attempt := attemptTimeoutMS
	if v, err := strconv.Atoi(c.QueryParam("attempt_ms")); err == nil && v >= 1 && v <= attemptTimeoutMS {
		attempt = v
	}
	epoch, _ := s.roomEpoch()
	d := views.Checkout{
		RoomEpoch:        epoch,
		Live:             s.live().Snapshot(),
		Presenter:        s.isPresenter(r),
		Locked:           s.cfg.PresenterToken != "",
		OrderID:          newOrderID(),
		Amount:           defaultAmountSatang,
		Key:              uuid.NewString(),
		BackoffBaseMS:    base,
		BackoffCapMS:     base * backoffCapMS / backoffBaseMS,
		MaxRetries:       backoffRetries,
		AttemptTimeoutMS: attempt,
		Retention:        "for " + s.cfg.Retention.String(),
		LockTimeout:      s.cfg.LockTimeout.String(),
		Lab:              s.labView(r.Context(), s.isPresenter(r)),
		Lesson:           lesson,
		Session:          session,
		You:              views.ScopeLabel(scope),
		LockTimeoutMS:    int(s.cfg.LockTimeout.Milliseconds()),
		SweepEveryMS:     int(s.cfg.SweepEvery.Milliseconds()),
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return render(c, http.StatusOK, views.CheckoutPage(d))
}

// handleBoard is GET /board: the projector view. Opening it as
// /board?token=<presenter token> marks this browser as the presenter's
// with a cookie, then reloads without the token so that it does not stay
// in the address bar on the projector.
func (s *Server) handleBoard(c echo.Context) error {
	r := c.Request()
	if tok := c.QueryParam("token"); tok != "" {
		if s.cfg.PresenterToken == "" {
			return c.Redirect(http.StatusSeeOther, "/board")
		}
		ok, wait := s.tryPresenterToken(r, tok)
		if wait > 0 {
			return tooManyGuesses(c, wait)
		}
		if !ok {
			return pay.Errorf(pay.EFORBIDDEN, "That presenter link is not right. Students do not need one: open the board without ?token=.")
		}
		http.SetCookie(c.Response(), s.presenterCookieFor(r))
		return c.Redirect(http.StatusSeeOther, "/board")
	}
	lesson, err := s.pageLesson(c, true)
	if err != nil {
		return err
	}
	l := s.live().Snapshot()
	d := views.Board{
		Live:      l,
		Join:      s.joinView(r),
		Steps:     l.Steps,
		Presenter: s.isPresenter(r),
		Locked:    s.cfg.PresenterToken != "",
		Lab:       s.labView(r.Context(), s.isPresenter(r)),
		Lesson:    lesson,
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return render(c, http.StatusOK, views.BoardPage(d))
}

// newOrderID makes an order number like A-4821.
func newOrderID() string {
	n, err := rand.Int(rand.Reader, big.NewInt(9000))
	if err != nil {
		return "A-1001"
	}
	return "A-" + strconv.FormatInt(1000+n.Int64(), 10)
}

// isLoopbackHost reports whether h names this machine only.
func isLoopbackHost(h string) bool {
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(h, "[]"))
	return ip != nil && ip.IsLoopback()
}

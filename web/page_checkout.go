package web

import (
	"crypto/rand"
	"math/big"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"paytwice/pay"
	"paytwice/views"
	"paytwice/web/board"
)

// The live pages' defaults.
const (
	defaultAmountSatang = 129900 // ฿1,299.00, the article's example
	backoffBaseMS       = 500
	backoffCapMS        = 8000
	backoffRetries      = 5
	attemptTimeoutMS    = 10000 // without an answer, the page gives an attempt up
)

// liveHandlers serve the live pages: the checkout card (GET /) and the
// board (GET /board), each drawn from the board's model at one event, the
// lab and the lesson. They translate HTTP; what the pages show is the
// board's, the lab's and the lesson's.
type liveHandlers struct {
	board     func() *board.Board
	pages     pageSource
	presenter presenterCheck
	// The server's settings the pages say.
	locked                             bool // a presenter token is configured
	retention, lockTimeout, sweepEvery time.Duration
	// byocInUse says a student has paid through the room's proxy
	// (byoc.go): the board shows its scoreboard.
	byocInUse func() bool
	// workshop is the board's workshop scoreboard, given where students
	// open its page.
	workshop func(r *http.Request, address string) views.WorkshopBoard
	// join is where students join, for the page r asked for (join.go).
	join func(r *http.Request) views.Join
}

// presenterCheck is how the live pages recognise the presenter and
// accept the presenter's link (presenter.go).
type presenterCheck interface {
	isPresenter(r *http.Request) bool
	tryPresenterToken(r *http.Request, got string) (ok bool, wait time.Duration, err error)
	presenterCookieFor(r *http.Request) *http.Cookie
}

// pageSource is what the live pages read besides the board: the lesson
// panel, the lab's panel and the room's versions.
type pageSource struct {
	// lesson is the page's lesson panel (guidedLessons.page).
	lesson func(c echo.Context, board bool) (views.Lesson, error)
	lab    labPanel
	room   roomVersions
}

// routes registers the live pages.
func (h liveHandlers) routes(e *echo.Echo) {
	e.GET("/", h.handleCheckout)
	e.GET("/board", h.handleBoard)
	e.GET("/board/-/workshop", h.handleBoardWorkshop)
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
func (h liveHandlers) handleCheckout(c echo.Context) error {
	r := c.Request()
	lesson, err := h.pages.lesson(c, false) // ?lesson=<chapter>; an unknown one is a 404
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
	epoch, books, _ := h.pages.room.roomEpoch()
	d := views.Checkout{
		RoomEpoch:        epoch,
		RoomBooks:        books,
		Live:             h.board().Snapshot(),
		Presenter:        h.presenter.isPresenter(r),
		Locked:           h.locked,
		OrderID:          newOrderID(),
		Amount:           defaultAmountSatang,
		Key:              uuid.NewString(),
		BackoffBaseMS:    base,
		BackoffCapMS:     base * backoffCapMS / backoffBaseMS,
		MaxRetries:       backoffRetries,
		AttemptTimeoutMS: attempt,
		Retention:        "for " + h.retention.String(),
		LockTimeout:      h.lockTimeout.String(),
		Lab:              h.pages.lab.view(r.Context(), h.presenter.isPresenter(r)),
		Lesson:           lesson,
		Session:          session,
		You:              views.ScopeLabel(scope),
		LockTimeoutMS:    int(h.lockTimeout.Milliseconds()),
		SweepEveryMS:     int(h.sweepEvery.Milliseconds()),
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return render(c, http.StatusOK, views.CheckoutPage(d))
}

// handleBoard is GET /board: the projector view. Opening it as
// /board?token=<presenter token> marks this browser as the presenter's
// with a cookie, then reloads without the token so that it does not stay
// in the address bar on the projector.
func (h liveHandlers) handleBoard(c echo.Context) error {
	r := c.Request()
	if tok := c.QueryParam("token"); tok != "" {
		if !h.locked {
			return c.Redirect(http.StatusSeeOther, "/board")
		}
		ok, wait, err := h.presenter.tryPresenterToken(r, tok)
		if err != nil {
			return err
		}
		if wait > 0 {
			return tooManyGuesses(c, wait)
		}
		if !ok {
			return pay.Errorf(pay.EFORBIDDEN, "That presenter link is not right. Students do not need one: open the board without ?token=.")
		}
		http.SetCookie(c.Response(), h.presenter.presenterCookieFor(r))
		return c.Redirect(http.StatusSeeOther, "/board")
	}
	lesson, err := h.pages.lesson(c, true)
	if err != nil {
		return err
	}
	l := h.board().Snapshot()
	d := views.Board{
		Live:      l,
		Join:      h.join(r),
		Steps:     l.Steps,
		Presenter: h.presenter.isPresenter(r),
		Locked:    h.locked,
		Lab:       h.pages.lab.view(r.Context(), h.presenter.isPresenter(r)),
		Lesson:    lesson,
		BYOC:      h.byocInUse != nil && h.byocInUse(),
	}
	if h.workshop != nil {
		d.Workshop = h.workshopPanel(r, d.Join)
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return render(c, http.StatusOK, views.BoardPage(d))
}

// workshopPanel is the board's workshop, with the address students open
// (the join card's first).
func (h liveHandlers) workshopPanel(r *http.Request, join views.Join) views.WorkshopBoard {
	address := "http://" + r.Host
	if len(join.URLs) > 0 {
		address = join.URLs[0]
	}
	return h.workshop(r, strings.TrimRight(address, "/")+"/workshop")
}

// handleBoardWorkshop is GET /board/-/workshop: the board's workshop
// panel alone, which the board asks for when its event stream says the
// workshop changed (static/board.js). With ?part=scores, asked by a board
// showing the open workshop, it is the scoreboard alone while the
// workshop stays open, and the closed workshop's place once it closed:
// closing reaches the board the way opening does.
func (h liveHandlers) handleBoardWorkshop(c echo.Context) error {
	if h.workshop == nil {
		return pay.Errorf(pay.ENOTFOUND, "This server runs no workshop.")
	}
	part := c.QueryParam("part")
	if part != "" && part != "scores" {
		return pay.Errorf(pay.EINVALID, "part must be scores or left out, not %q.", pay.Truncate(part, 20))
	}
	panel := h.workshopPanel(c.Request(), h.join(c.Request()))
	c.Response().Header().Set("Cache-Control", "no-store")
	if part == "scores" && panel.On {
		return render(c, http.StatusOK, views.WorkshopScores(panel))
	}
	return render(c, http.StatusOK, views.BoardWorkshop(panel))
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

package web

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"paytwice/pay"
	"paytwice/sim"
	"paytwice/web/board"
	"paytwice/web/room"
	"paytwice/web/workshop"
)

// workshopHandlers serve the workshop (web/workshop): a student's page
// and API, the board's scoreboard, the presenter's switches, and each
// student's gateway. Each holds only what it uses.
type workshopHandlers struct {
	ws *workshop.Workshop
	// shared says several servers show the workshop: the board reads the
	// scoreboard the room's store keeps, whichever server runs it.
	shared bool
	logf   func(string, ...any)
	// The boards fetch every second: each failure they meet is written
	// once in a while, each kind on its own so that one does not hide
	// another. notCounted: the kept rows' charges are not known;
	// countsBefore: this server's rows show the counts read before;
	// keptUnread: the kept scoreboard could not be read.
	notCounted, countsBefore, keptUnread *sparseLog
	guard                                *workshop.Guard
	isPresenter                          func(*http.Request) bool
	clientIP                             func(*http.Request) string
	// runs are the per-address buckets of asked-for runs: a run is the
	// heaviest thing a student can ask of the room.
	runs *bucketTable
	// gateways are the per-secret buckets of the students' gateways:
	// every charge is a write to the room's store.
	gateways *bucketTable
}

// The workshop's JSON API.
const (
	workshopAPI      = "/api/workshop"
	workshopGateways = "/workshop/gw/"
)

// WorkshopRegister is the body of POST /api/workshop/endpoint.
type WorkshopRegister struct {
	Name string `json:"name"`
	URL  string `json:"url"`
}

// WorkshopSettings is the body of PUT /api/workshop: the presenter opens
// or closes the workshop, sets every gateway's faults, and may change
// the networks the room calls (addresses or networks). On and Allowed
// absent leave the workshop open or closed and the networks as they were:
// a PUT that only changes the faults never closes a running workshop.
type WorkshopSettings struct {
	On      *bool                 `json:"on,omitempty"`
	Faults  sim.GatewayBaseFaults `json:"faults"`
	Allowed *[]string             `json:"allowed,omitempty"`
}

// WorkshopStudent is a student's own view, and one row of the board.
type WorkshopStudent struct {
	Name     string `json:"name"`
	Endpoint string `json:"endpoint"`
	// Gateway is, in a student's own view only, the URL their endpoint
	// charges through.
	Gateway string `json:"gateway,omitempty"`
	State   string `json:"state"`
	Place   int    `json:"queue_place,omitempty"`
	// Cases counts the cases decided so far in the latest run.
	Cases        int    `json:"cases"`
	Passed       int    `json:"passed"`
	Failed       int    `json:"failed"`
	FirstSafety  string `json:"first_safety_failure,omitempty"`
	FirstFailure string `json:"first_failure,omitempty"`
	Message      string `json:"message,omitempty"`
	// Charges is how many charges the student's gateway took: those its
	// books hold and those pruned (Pruned), oldest first, to keep them
	// within their bound.
	Charges int   `json:"gateway_charges"`
	Pruned  int64 `json:"gateway_pruned"`
	// ChargesUnknown says the books did not answer as the row was read:
	// gateway_charges and gateway_pruned are then 0, not a count.
	ChargesUnknown bool                  `json:"gateway_charges_unknown,omitempty"`
	Faults         sim.GatewayBaseFaults `json:"faults"`
}

// WorkshopBoard is GET /api/workshop.
type WorkshopBoard struct {
	On       bool                  `json:"on"`
	Faults   sim.GatewayBaseFaults `json:"faults"`
	Allowed  []string              `json:"allowed"`
	Queued   int                   `json:"queued"`
	Students []WorkshopStudent     `json:"students"`
}

func (s *Server) workshopHandlers() workshopHandlers {
	return workshopHandlers{ws: s.endpoints.workshop, shared: s.servers.peers.Shared(), logf: s.logf, notCounted: newSparseLog(time.Now, sparseLogEvery, s.logf),
		countsBefore: newSparseLog(time.Now, sparseLogEvery, s.logf), keptUnread: newSparseLog(time.Now, sparseLogEvery, s.logf),
		guard: s.endpoints.guard, isPresenter: s.admission.presenter.isPresenter, clientIP: s.admission.presenter.clientIP,
		runs:     newBucketTable(time.Now, s.cfg.Limits.WorkshopRuns, s.cfg.Limits.Addresses, s.cfg.Limits.IdleAfter),
		gateways: newBucketTable(time.Now, s.cfg.Limits.WorkshopGateway, s.cfg.Limits.Addresses, s.cfg.Limits.IdleAfter)}
}

func (h workshopHandlers) routes(e *echo.Echo, presenterOnly echo.MiddlewareFunc) {
	e.GET(workshopAPI, h.handleBoardJSON)
	e.PUT(workshopAPI, h.handleSettings, presenterOnly)
	e.POST(workshopAPI+"/run-all", h.handleRunAllJSON, presenterOnly)
	e.POST(workshopAPI+"/remove", h.handleRemoveJSON, presenterOnly)
	e.POST(workshopAPI+"/reset", h.handleResetJSON, presenterOnly)
	e.GET(workshopAPI+"/me", h.handleMeJSON)
	e.POST(workshopAPI+"/endpoint", h.handleRegisterJSON)
	e.POST(workshopAPI+"/run", h.handleRunJSON)
	gw := h.handleGateway
	e.POST(workshopGateways+":secret/charges", gw)
	e.GET(workshopGateways+":secret/charges", gw)
	e.GET(workshopGateways+":secret/ledger", gw)
	h.pageRoutes(e, presenterOnly)
}

// who is the student a request comes from: its bearer token or its
// browser session; "" for neither.
func (h workshopHandlers) who(r *http.Request) string {
	if _, _, ok := bearerToken(r.Header.Get("Authorization")); ok || hasSession(r) {
		return callerScope(r)
	}
	return ""
}

// noteSelf tells the guard the address this request reached the server
// at: the room never calls itself there.
func (h workshopHandlers) noteSelf(r *http.Request) {
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(interface{ String() string }); ok {
		if ap, err := netip.ParseAddrPort(a.String()); err == nil {
			h.guard.NoteSelf(ap)
		}
	}
}

// gatewayURL is the address a student's endpoint charges through, as
// the student reached this server.
func gatewayURL(r *http.Request, path string) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host + path
}

// What the board shows of a student's own text: their name was checked
// when they registered; their endpoint's address and the reasons quoted
// from its answers are cut and drawn printable, so no control or bidi
// character reorders the row.
const (
	shownEndpoint = 64
	shownReason   = 180
)

// shownRow is r as the board and the API show it.
func shownRow(r workshop.Row) workshop.Row {
	r.Name = board.Plain(r.Name, 40)
	r.Endpoint = board.Plain(r.Endpoint, shownEndpoint)
	r.Run.FirstSafety = board.Plain(r.Run.FirstSafety, shownReason)
	r.Run.FirstFailure = board.Plain(r.Run.FirstFailure, shownReason)
	r.Run.Message = board.Plain(r.Run.Message, shownReason)
	return r
}

func studentJSON(m workshop.Row) WorkshopStudent {
	m = shownRow(m)
	return WorkshopStudent{Name: m.Name, Endpoint: m.Endpoint, State: string(m.Run.State), Place: m.Place,
		Cases: m.Run.Done, Passed: m.Run.Passed, Failed: m.Run.Failed, FirstSafety: m.Run.FirstSafety,
		FirstFailure: m.Run.FirstFailure, Message: m.Run.Message, Charges: m.Charges, Pruned: m.Pruned, ChargesUnknown: m.ChargesUnknown, Faults: m.Run.Faults}
}

func (h workshopHandlers) mineJSON(r *http.Request, m workshop.Mine) WorkshopStudent {
	v := studentJSON(m.Row)
	v.Gateway = gatewayURL(r, m.GatewayPath)
	return v
}

// scoreboard is the scoreboard to show: this server's, or with several
// servers the one the room's store keeps, so that every server's board
// shows the same rows. Where the kept scoreboard cannot be read, this
// server's; where only the books cannot, the kept rows with their
// charges marked not known.
func (h workshopHandlers) scoreboard(ctx context.Context) workshop.Scoreboard {
	if !h.shared {
		h.countBooks(ctx)
		return h.ws.Scoreboard()
	}
	sb, err := h.ws.KeptScoreboard(ctx)
	if err != nil {
		h.keptUnread.printf("workshop: %v: the board shows this server's scoreboard", err)
		h.countBooks(ctx)
		return h.ws.Scoreboard()
	}
	if sb.ChargesErr != nil {
		h.notCounted.printf("%v: the board shows the charges as not known", sb.ChargesErr)
	}
	return sb
}

// countBooks has the gateways' counts read from their books before rows
// are shown: charges taken through another server count too. Where the
// books do not answer, the rows show the counts last read, and the log
// says so.
func (h workshopHandlers) countBooks(ctx context.Context) {
	if err := h.ws.CountBooks(ctx); err != nil {
		h.countsBefore.printf("%v: the rows show the counts read before", err)
	}
}

func (h workshopHandlers) board(ctx context.Context) WorkshopBoard {
	sb := h.scoreboard(ctx)
	v := WorkshopBoard{On: sb.On, Faults: sb.Faults, Queued: sb.Queued, Allowed: []string{}, Students: []WorkshopStudent{}}
	for _, p := range sb.Allowed {
		v.Allowed = append(v.Allowed, p.String())
	}
	for _, row := range sb.Rows {
		v.Students = append(v.Students, studentJSON(row))
	}
	return v
}

func (h workshopHandlers) handleBoardJSON(c echo.Context) error {
	return c.JSON(http.StatusOK, h.board(c.Request().Context()))
}

func (h workshopHandlers) handleSettings(c echo.Context) error {
	var req WorkshopSettings
	if err := decodeAdminJSON(c.Request(), &req); err != nil {
		return err
	}
	if err := h.apply(req); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, h.board(c.Request().Context()))
}

// apply sets the presenter's settings, all or none.
func (h workshopHandlers) apply(req WorkshopSettings) error {
	if err := req.Faults.Validate(); err != nil {
		return pay.Errorf(pay.EINVALID, "%s.", err.Error())
	}
	var allowed []workshop.Allow
	if req.Allowed != nil {
		var err error
		if allowed, err = workshop.ParseAllowed(strings.Join(*req.Allowed, ",")); err != nil {
			return pay.Errorf(pay.EINVALID, "allowed: %s.", err.Error())
		}
	}
	if err := h.ws.SetFaults(req.Faults); err != nil {
		return err
	}
	if req.Allowed != nil {
		h.ws.SetAllowed(allowed)
	}
	if req.On != nil {
		h.ws.SetOn(*req.On)
	}
	return nil
}

func (h workshopHandlers) handleRunAllJSON(c echo.Context) error {
	queued, left := h.ws.AskAll()
	return c.JSON(http.StatusOK, map[string]int{"queued": queued, "no_room": left})
}

func (h workshopHandlers) handleMeJSON(c echo.Context) error {
	h.countBooks(c.Request().Context())
	m, ok := h.ws.Mine(h.who(c.Request()))
	if !ok {
		return pay.Errorf(pay.ENOTFOUND, "You have not registered an endpoint yet: POST %s/endpoint {\"name\": …, \"url\": …}.", workshopAPI)
	}
	return c.JSON(http.StatusOK, h.mineJSON(c.Request(), m))
}

func (h workshopHandlers) handleRegisterJSON(c echo.Context) error {
	var req WorkshopRegister
	if err := decodeAdminJSON(c.Request(), &req); err != nil {
		return err
	}
	m, err := h.register(c, req)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, h.mineJSON(c.Request(), m))
}

// register records the caller's endpoint; a browser with no session gets
// one, which is how the room knows it again.
func (h workshopHandlers) register(c echo.Context, req WorkshopRegister) (workshop.Mine, error) {
	r := c.Request()
	h.noteSelf(r)
	if _, _, ok := bearerToken(r.Header.Get("Authorization")); !ok && !hasSession(r) {
		ensureSession(c.Response(), r)
	}
	return h.ws.Register(r.Context(), h.who(r), h.clientIP(r), req.Name, req.URL)
}

func (h workshopHandlers) handleRunJSON(c echo.Context) error {
	m, err := h.ask(c.Request())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusAccepted, h.mineJSON(c.Request(), m))
}

// ask queues the caller's run, within their address's share of runs.
func (h workshopHandlers) ask(r *http.Request) (workshop.Mine, error) {
	if _, ok := h.ws.Mine(h.who(r)); !ok {
		return h.ws.Ask(h.who(r), false) // says to register first
	}
	if !h.isPresenter(r) {
		if wait := h.runs.take(h.clientIP(r)); wait > 0 {
			return workshop.Mine{}, pay.Errorf(pay.EBUSY, "Your computer has asked for runs too often: ask again in %d s.", waitSeconds(wait))
		}
	}
	return h.ws.Ask(h.who(r), h.isPresenter(r))
}

// handleGateway is a student's gateway: charges and their books, nothing
// that changes its switches (those are the presenter's and the checker's).
func (h workshopHandlers) handleGateway(c echo.Context) error {
	secret := c.Param("secret")
	if !h.ws.Known(secret) {
		_, _, err := h.ws.EnterGateway(secret) // says no such gateway, or not yet
		if errors.Is(err, workshop.ErrStarting) {
			c.Response().Header().Set("Retry-After", strconv.Itoa(waitSeconds(h.ws.ReadAgainEvery())))
		}
		return err
	}
	// Counted by the gateway, whoever calls it: behind one secret is one
	// student's endpoint, whatever addresses it calls from.
	if wait := h.gateways.take(secret); wait > 0 {
		return refuseRequest(c, wait, fmt.Sprintf("Your workshop gateway has answered more requests than its share (%d at once, then one every %v; a checker run stays well within it)",
			h.gateways.rate.Burst, h.gateways.rate.Every))
	}
	g, leave, err := h.ws.EnterGateway(secret)
	if err != nil {
		return err
	}
	defer leave()
	r := c.Request()
	prefix := workshopGateways + c.Param("secret")
	http.StripPrefix(prefix, g).ServeHTTP(c.Response(), r)
	return nil
}

// newWorkshop makes the workshop and its guard from the server's
// settings: the networks allowed, or by default the private networks the
// server is served on.
func newWorkshop(cfg Config, now func() time.Time, keeper room.Peers, books workshop.Books, logf func(string, ...any), news *workshopNews) (*workshop.Guard, *workshop.Workshop) {
	var listen []netip.AddrPort
	for _, a := range []net.Addr{cfg.Listener, cfg.ListenAddr} {
		if a, ok := a.(*net.TCPAddr); ok {
			listen = append(listen, a.AddrPort())
		}
	}
	allowed := cfg.WorkshopAllow
	if allowed == nil {
		var on netip.Addr // unknown: as if on every interface
		if len(listen) > 0 {
			on = listen[0].Addr() // the real listener's when known
		}
		allowed = workshop.DefaultAllowed(on)
	}
	g := workshop.NewGuard(allowed, listen...)
	var announce func(ctx context.Context, version int64) error
	if keeper.Shared() {
		// The other servers hear of new settings over the room's relay
		// (relay.go) and read them at once.
		announce = func(ctx context.Context, version int64) error {
			return keeper.Notify(ctx, workshop.SettingsChannel, strconv.FormatInt(version, 10))
		}
	}
	return g, workshop.New(workshop.Config{Guard: g, Now: now, Tune: cfg.workshopTune, Keeper: keeper, Books: books, BooksCap: cfg.workshopBooksCap, Announce: announce,
		Logf: logf, ReadAgainEvery: cfg.workshopRestoreWait, SaveEvery: cfg.workshopSaveEvery,
		Changed: news.changed, Saved: news.saved})
}

// ParseWorkshopAllow reads -workshop-allow: networks and addresses
// separated by commas.
func ParseWorkshopAllow(s string) ([]workshop.Allow, error) { return workshop.ParseAllowed(s) }

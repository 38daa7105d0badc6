// Package web is paytwice's HTTP edge: the echo server, its routes and
// middleware, the payments API, the live event stream and the pages.
// Domain errors become HTTP statuses here and nowhere else.
package web

import (
	"context"
	"errors"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"paytwice/pay"
	"paytwice/pay/check"
	"paytwice/sim"
	"paytwice/views"
	"paytwice/web/board"
	"paytwice/web/live"
	"paytwice/web/room"
	"paytwice/web/room/lesson"
	"paytwice/web/room/step"
	"paytwice/web/workshop"
)

// Config holds the server's settings.
type Config struct {
	// Retention is how long done keys are kept before pruning.
	Retention time.Duration
	// LockTimeout is how long a key may stay started before the sweeper
	// asks the gateway what happened.
	LockTimeout time.Duration
	// GatewayTimeout bounds one request's work after its claim. It must be
	// shorter than LockTimeout, or the sweeper could close a key whose
	// request is still talking to the gateway.
	GatewayTimeout time.Duration
	// PruneEvery and SweepEvery are the background jobs' periods.
	PruneEvery, SweepEvery time.Duration
	// BodyTimeout bounds how long a request may take to send its body
	// (DefaultBodyTimeout when zero); headers have their own limit in
	// the http.Server.
	BodyTimeout time.Duration
	// PresenterToken, when set, is required to change switches or reset.
	PresenterToken string
	// PresenterCookieKey signs the presenter's cookie; nil means the
	// cookie is derived from the token alone, so that it still counts
	// after a restart and on every server given the same token.
	PresenterCookieKey []byte
	// Ledger holds the simulated gateway's charges: the payments store
	// itself when it holds the ledger's tables too, or, as main gives it, a
	// database of its own, as a real provider's database is not ours: its
	// commits then run in parallel with ours. It is required.
	Ledger Ledger
	// Peers are the other servers of the class (web/room): a PostgreSQL
	// database that several servers share, or nil for a server on its own
	// (room.Memory()).
	Peers room.Peers
	// StepLimit is how long step mode may hold a request at one checkpoint
	// (default 2 minutes).
	StepLimit time.Duration
	// ListenAddr is the address clients reach the server at: the
	// listener's real address (net.Listener.Addr), or the front door's
	// when the server sits behind a proxy (-public-addr): the board and
	// /join show only addresses that open this app. Unset, the address
	// each connection arrived on stands in for it.
	ListenAddr net.Addr
	// Listener is the listener's own address when ListenAddr is another
	// (-public-addr): the workshop never calls this machine at either.
	Listener net.Addr
	// BehindFrontDoor says that the connections from this machine come
	// from paytwice cluster's front door, whose X-Forwarded-For names the
	// client: the presenter's wrong-token limit counts by it.
	BehindFrontDoor bool
	// FrontDoorMark is the secret the front door sends in FrontDoorHeader
	// on every request it forwards: X-Forwarded-For is believed only on a
	// request that carries it, so a client that reaches this server's port
	// directly cannot choose the address it is counted by. Empty: never.
	FrontDoorMark string
	// Command is what was run to start this server ("paytwice" when
	// empty): the board tells a presenter whose room cannot reach it how
	// to start it again.
	Command string
	// Logger receives unexpected errors; nil means the standard logger.
	Logger *log.Logger
	// Limits are the room's fair shares per client address: streams,
	// request rates, the timeline's shares (fairshare.go). Zero fields
	// mean DefaultLimits'.
	Limits Limits
	// LimitsClock is the time the fair shares' buckets and tables count
	// by; nil means the wall clock. (The room's clock, which the
	// presenter may move, is never it.)
	LimitsClock func() time.Time
	// BoardClock is the real time that paces the board's shares and its
	// busy mode (web/board); nil means the wall clock. Like LimitsClock,
	// never the room's clock.
	BoardClock func() time.Time
	// Name names this server among the several that may share one
	// database (-name): the timeline says which server handled each
	// request. "" for a server on its own.
	Name string
	// WorkshopAllow are the networks the workshop may call students'
	// endpoints on (-workshop-allow); nil means the private networks this
	// server is served on (web/workshop).
	WorkshopAllow []workshop.Allow
	// workshopTune adjusts every workshop run's checker: tests shorten
	// the runs with it.
	workshopTune func(*check.Config)
}

// withDefaults fills unset fields.
func (c Config) withDefaults() Config {
	if c.Retention <= 0 {
		c.Retention = 24 * time.Hour
	}
	if c.LockTimeout <= 0 {
		c.LockTimeout = 30 * time.Second
	}
	if c.GatewayTimeout <= 0 || c.GatewayTimeout >= c.LockTimeout {
		c.GatewayTimeout = c.LockTimeout / 2
	}
	if c.PruneEvery <= 0 {
		c.PruneEvery = time.Minute
	}
	if c.SweepEvery <= 0 {
		c.SweepEvery = 5 * time.Second
	}
	if c.BodyTimeout <= 0 {
		c.BodyTimeout = DefaultBodyTimeout
	}
	if c.Logger == nil {
		c.Logger = log.Default()
	}
	c.Limits = c.Limits.withDefaults()
	return c
}

// Server is paytwice's HTTP server. Handlers are its methods.
type Server struct {
	cfg     Config
	echo    *echo.Echo
	db      Store
	ledger  Ledger // the gateway's; may be db itself
	peers   room.Peers
	clock   *sim.Clock
	gateway *sim.Gateway
	// simGateway is the provider served at /sim/gateway for applications
	// under test (sim_gateway.go); the room's reset empties it.
	simGateway *sim.GatewayHandler
	faults     *sim.FaultPlan
	hub        *live.Hub
	// attempts are the checkout pages' recent payment attempts, so that
	// one the browser sent twice shows as such.
	attempts attemptLog
	// room holds the switches, the lab, the lesson, the clock's offset
	// and step mode, shared by every server of the class (room.go): what
	// requests need of them they read from its snapshot.
	room *room.Room[room.State]
	// barriers is this server's side of a reset's barrier, with several
	// servers on the database (web/room).
	barriers *room.Barriers

	// baseCtx outlives requests and ends at shutdown: claimed work runs
	// under it, not under the client's connection.
	baseCtx context.Context
	// workBase is what a payment's work runs under: baseCtx, ended early
	// by AbandonWork when a shutdown will wait no longer.
	workBase    context.Context
	abandonWork context.CancelCauseFunc
	stop        context.CancelFunc
	// sleep waits during the delay fault; tests may replace it.
	sleep func(ctx context.Context, d time.Duration) error

	// protocol runs the payment protocol (pay/service.go); payments.go
	// adapts it to HTTP.
	protocol *pay.Service
	// idleSweeps lets the sweeper skip its query while no key can be
	// started (idle.go).
	idleSweeps *idleSweeps
	// inflight is held shared by every payment and the sweeper, and
	// exclusively by a reset, which so waits for them (web/admin.go).
	inflight sync.RWMutex

	// The live pages' projector, started on first use (web/projector.go).
	liveOnce sync.Once
	proj     *board.Board
	// liveStarted says proj was started; streamsEnded that EndStreams
	// was called.
	liveStarted, streamsEnded atomic.Bool

	// relay carries live events between the servers that share one
	// database (web/room/relay.go, web/relay.go); nil on a server of its
	// own.
	relay *room.Relay

	// The common-mistakes lab: its counts and locks (web/lab.go); its
	// settings are the room's.
	lab *labState
	// labChecking is set while the lab page's checker runs (lab_check.go).
	labChecking atomic.Bool
	// labCheckAuth are the credentials of the lab checker's run under
	// way, nil between runs.
	labCheckAuth atomic.Pointer[[2]string]

	// listenAddr is the listener's address, for the join address (join.go).
	listenAddr atomic.Pointer[net.TCPAddr]
	// steps holds payments in step mode (web/room/step; its HTTP side in
	// step.go).
	steps *step.Stepper

	// How the presenter is recognised (web/presenter.go).
	presenter presenterAuthState
	// streams shares the live event streams out among addresses and
	// sessions; limits the rest of what is not a payment (fairshare.go).
	streams *streamAdmission
	limits  *requestLimits
	// payments shares the work on payments out among addresses and
	// callers (payment_admission.go).
	payments *paymentAdmission
	// work keeps the students' simulations to their part of the
	// processor (student_work.go).
	work *studentWork
	// lessons are the guided lessons, narration ticks the running
	// chapter's "Watch for" items (web/room/lesson).
	lessons   lesson.Book
	narration *lesson.Narrator
	// judge solves the scheduler's puzzle from the books (puzzle.go).
	judge *puzzleJudge
	// workshop is "bring your own endpoint" (web/workshop), and
	// workshopGuard what it may call.
	workshop      *workshop.Workshop
	workshopGuard *workshop.Guard
}

// NewServer wires a server around an open store.
func NewServer(cfg Config, db Store, clock *sim.Clock) *Server {
	cfg = cfg.withDefaults()
	s := &Server{
		cfg:    cfg,
		db:     db,
		ledger: cfg.Ledger,
		peers:  cfg.Peers,
		clock:  clock,
		faults: sim.NewFaultPlan(),
		hub:    live.New(live.DefaultSize, clock.Now),
		sleep:  pay.Sleep,
	}
	s.hub.SetServer(cfg.Name)
	if cfg.BoardClock != nil {
		s.hub.SetWall(cfg.BoardClock)
	}
	s.hub.SetShares(cfg.Limits.TimelinePerSource, cfg.Limits.TimelineTotal)
	if s.ledger == nil {
		panic("web: NewServer needs Config.Ledger (the payments store itself when it holds the ledger's tables)")
	}
	if s.peers == nil {
		s.peers = room.Memory()
	}
	s.room, s.barriers = newRoom(s)
	clock.Follow(func() time.Duration { return s.room.Load().ClockOffset })
	s.lab = newLab(s.room, s.flagPersonalKey)
	if a, ok := cfg.ListenAddr.(*net.TCPAddr); ok {
		s.listenAddr.Store(a)
	}
	s.presenter = newPresenterAuth(cfg.PresenterToken, cfg.PresenterCookieKey)
	limitsNow := cfg.LimitsClock
	if limitsNow == nil {
		limitsNow = time.Now
	}
	s.streams = newStreamAdmission(cfg.Limits, limitsNow)
	s.limits = newRequestLimits(cfg.Limits, limitsNow, s.clientIP, s.hasPriority)
	s.payments = newPaymentAdmission(cfg.Limits, limitsNow, cfg.PresenterToken != "")
	s.payments.callers = s.limits.callers
	s.work = newStudentWork(cfg.Limits, limitsNow)
	s.limits.presenter = &s.work.presenter
	s.lessons = lesson.Build(cfg.LockTimeout)
	s.gateway = sim.NewGateway(s.ledger, clock.Now)
	s.simGateway = sim.NewGatewayHandler(clock.Now)
	s.idleSweeps = newIdleSweeps(!s.peers.Shared())
	s.protocol = &pay.Service{Store: countingStorage{Storage: talliedStorage{Storage: db, t: s.lab.tally}, g: s.idleSweeps}, Gateway: s.gateway.With(pay.GatewayFaults{}), Now: clock.Now,
		Sleep: func(ctx context.Context, d time.Duration) error { return s.sleep(ctx, d) },
		WorkContext: func() (context.Context, context.CancelFunc) {
			return pay.NewWorkContext(s.workBase, s.cfg.GatewayTimeout)
		}}
	s.baseCtx, s.stop = context.WithCancel(context.Background())
	s.workBase, s.abandonWork = context.WithCancelCause(s.baseCtx)
	s.steps = step.New(s.baseCtx, step.Config{Name: cfg.Name, Limit: cfg.StepLimit, Lease: cfg.LockTimeout,
		Room: s.room, Peers: s.peers, Hub: s.hub, Now: s.clock.Now, Logf: s.logf})
	s.narration = lesson.NewNarrator(s.lessons, s.room, s.hub)
	s.judge = &puzzleJudge{room: s.room, hub: s.hub, charges: s.orderCharges, logf: s.logf}
	s.workshopGuard, s.workshop = newWorkshop(cfg, clock.Now)
	s.limits.knownGateway = s.workshop.Known
	s.workshop.Start(s.baseCtx)
	// The handler groups hold what they use: make them once it all is.
	s.echo = s.routes()
	s.room.Start(s.baseCtx)
	booksCtx, cancelBooks := context.WithTimeout(s.baseCtx, 10*time.Second)
	if err := room.EnsureBooks(booksCtx, s.room); err != nil {
		s.logf("room: naming its books: %v", err)
	}
	cancelBooks()
	s.startRelay()
	s.steps.StartCommands(s.relay != nil) // after the relay, whose connection may carry them
	return s
}

// Hub returns the server's event hub.
func (s *Server) Hub() *live.Hub { return s.hub }

// Handler returns the HTTP handler. Go's cross-origin protection wraps
// it: a state-changing request that a browser says comes from another site
// is refused, while curl and other clients that send neither Origin nor
// Sec-Fetch-Site pass. Inside it, a request's body must arrive within
// Config.BodyTimeout.
func (s *Server) Handler() http.Handler {
	return crossOriginGuard(bodyDeadline(s.cfg.BodyTimeout, s.echo))
}

// EndStreams ends every live page's event stream and refuses new ones,
// leaving the hub open: at shutdown, the payments still in flight then
// publish their steps, and the other servers sharing the database still
// hear of them, while no stream holds the HTTP server's shutdown up.
func (s *Server) EndStreams() {
	s.streamsEnded.Store(true)
	if s.liveStarted.Load() {
		s.live().Close()
	}
}

// AbandonWork is for a shutdown that has waited long enough for the
// payments in flight: their work ends now, and each one still waiting on
// the gateway answers that its outcome is unknown (the key stays started,
// for the sweeper) rather than not at all when the process exits.
func (s *Server) AbandonWork() { s.abandonWork(errWorkAbandoned) }

// errWorkAbandoned is why the work of payments ended: AbandonWork.
var errWorkAbandoned = errors.New("the server is stopping and waits no longer for the work of payments in flight")

// workAbandoned reports whether AbandonWork was called.
func (s *Server) workAbandoned() bool { return errors.Is(context.Cause(s.workBase), errWorkAbandoned) }

// Close ends background work and wakes every event stream; call it when
// the HTTP server has stopped accepting requests.
func (s *Server) Close() {
	s.stop()
	s.room.Wait()
	s.steps.WaitCommands()
	s.hub.Close()
}

func (s *Server) logf(format string, args ...any) { s.cfg.Logger.Printf(format, args...) }

func (s *Server) routes() *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = s.handleError
	e.Use(middleware.RecoverWithConfig(middleware.RecoverConfig{DisableErrorHandler: false}))
	e.Use(securityHeaders)
	e.Use(rememberPresenter) // before anything asks who sent the request
	if s.cfg.Name != "" {
		e.Use(servedBy(s.cfg.Name))
	}
	e.Use(s.anonymousByAddress)        // before anything reads the scope
	e.Use(s.freshConnectionPerPayment) // before the lab's dispatcher, which reads the scope
	e.Use(requireClearScope)
	e.Use(s.limits.middleware)
	e.Use(middleware.GzipWithConfig(middleware.GzipConfig{
		MinLength: 512,
		// An event stream must reach the browser as each event is written;
		// a compressor would hold it back until its buffer fills. API
		// answers are a few hundred bytes: compressing them costs more CPU
		// than it saves bytes.
		Skipper: func(c echo.Context) bool {
			p := c.Request().URL.Path
			return p == "/events" || strings.HasPrefix(p, "/v1/")
		},
	}))
	e.GET("/static/*", s.handleStatic)

	e.POST(paymentsPath, s.handleCreatePayment)
	e.GET(paymentsPath, s.handleListPayments)
	e.GET(paymentsPath+"/:id", s.handleGetPayment)
	s.routeStripeSandbox(e)
	e.GET("/v1/idempotency-policy", s.handlePolicy)
	e.GET("/openapi.json", s.handleOpenAPI)
	e.GET("/clients", s.handleClients)
	e.GET("/problems", s.handleProblemIndex)
	e.GET("/problems/:code", s.handleProblemPage)
	adminHandlers{demo: s}.routes(e, s.presenterOnly)
	byo := s.byocRoutes(e)
	ws := s.workshopHandlers()
	liveHandlers{board: s.live, pages: s, locked: s.cfg.PresenterToken != "", retention: s.cfg.Retention,
		lockTimeout: s.cfg.LockTimeout, sweepEvery: s.cfg.SweepEvery, byocInUse: byo.inUse, workshop: ws.boardView}.routes(e)
	simHandlers{isPresenter: s.isPresenter, priority: s.hasPriority, clientIP: s.clientIP, work: s.work}.routes(e)
	s.simGatewayRoutes(e)
	labHandlers{lab: s, isPresenter: s.isPresenter}.routes(e, s.presenterOnly)
	s.exportRoutes(e)
	s.joinRoutes(e)
	s.boardHandlers().routes(e, s.presenterOnly)
	s.deliveryRoutes(e)
	s.pollHandlers().routes(e, s.presenterOnly)
	s.puzzleHandlers().routes(e, s.presenterOnly)
	ws.routes(e, s.presenterOnly)
	return e
}

// handleError turns echo's own errors (unknown route, wrong method,
// panics) and any error a handler returns into a problem: problem+json
// for API clients, a readable page for browsers.
func (s *Server) handleError(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	r := c.Request()
	var he *echo.HTTPError
	switch {
	case errors.As(err, &he) && he.Code == http.StatusNotFound:
		err = pay.Errorf(pay.ENOTFOUND, "There is nothing at %s.", r.URL.Path)
	case errors.As(err, &he) && he.Code == http.StatusMethodNotAllowed:
		err = pay.Errorf(pay.EMETHOD, "%s is not allowed on %s.", r.Method, r.URL.Path)
	case pay.ErrorCode(err) == pay.EINTERNAL:
		s.logf("%s %s: %v", r.Method, r.URL.Path, err)
	}
	if wantsHTML(r) {
		p := problemFor(pay.ErrorCode(err))
		_ = render(c, p.Status, views.ErrorPage(p.Title, pay.ErrorMessage(err), p.Status))
		return
	}
	_ = writeProblem(c, err)
}

// wantsHTML reports whether r comes from a browser navigating to a page
// rather than from an API client.
func wantsHTML(r *http.Request) bool {
	if strings.HasPrefix(r.URL.Path, "/v1/") || strings.HasPrefix(r.URL.Path, "/api/") {
		return false
	}
	return strings.Contains(r.Header.Get("Accept"), "text/html")
}

// ServerHeader names, on every answer, the server that gave it.
const ServerHeader = "Paytwice-Server"

// servedBy names this server on every answer: behind a load balancer the
// two requests of one double-click may be answered by two servers, and
// only the database can keep them from charging twice.
func servedBy(name string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			c.Response().Header().Set(ServerHeader, name)
			return next(c)
		}
	}
}

// securityHeaders sets a strict Content-Security-Policy: every script and
// style comes from this server, and nothing is inlined.
func securityHeaders(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		// The values are shared by every response rather than made for
		// each: a header's value slice is only ever replaced, never written
		// in place, and a full slice expression makes an append copy it.
		h := c.Response().Header()
		h["Content-Security-Policy"] = cspValue
		h["X-Content-Type-Options"] = nosniffValue
		h["Referrer-Policy"] = referrerValue
		return next(c)
	}
}

var (
	cspValue      = []string{"default-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"}[:1:1]
	nosniffValue  = []string{"nosniff"}[:1:1]
	referrerValue = []string{"same-origin"}[:1:1]
)

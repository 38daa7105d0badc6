// Package web is paytwice's HTTP edge: the echo server, its routes and
// middleware, the payments API, the live event stream and the pages.
// Domain errors become HTTP statuses here and nowhere else.
package web

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"paytwice/pay"
	"paytwice/sim"
	"paytwice/views"
	"paytwice/web/live"
	"paytwice/web/room"
	"paytwice/web/room/lesson"
	"paytwice/web/room/step"
)

// Server is paytwice's HTTP server and the composition root of web: it
// holds the parts several groups share (the store, the hub, the room, the
// clock, the payments' protocol) and builds each handler group from only
// what that group uses (routes): the payments' (payment_handlers.go), the
// admin's, the board's, the lab's and the others'; the fault switches are
// a small type of their own (faults.go), as are the lab (mistakesLab,
// lab.go), the background jobs (Jobs, jobs.go), the reset (demoReset,
// admin.go), the guided lessons (guidedLessons, lessons.go) and the answer
// counts (answer_counts.go). The shared parts are gathered by what they
// are (server_parts.go). What is still its own methods is the builders of
// the groups.
type Server struct {
	cfg   Config
	echo  *echo.Echo
	db    Store
	clock *sim.Clock
	hub   *live.Hub
	// room holds the switches, the lab, the lesson, the clock's offset
	// and step mode, shared by every server of the class (room.go): what
	// requests need of them they read from its snapshot.
	room *room.Room[room.State]
	// servers are this server's ties to the others of its class.
	servers classTies
	// life is the server's lifetime as its background work and the
	// payments' work see it.
	life serverLife
	// world is the simulated provider: its gateway and what drives it.
	world simWorld
	// sims are the backoff and herd simulations at work and the herd's
	// results (sim_runs.go).
	sims *simRuns
	// payments are the parts of the payments that the sweeper and the
	// reset share with the payment handlers.
	payments paymentParts

	// pages are the live pages' board, its answer counts and the place
	// students join.
	pages livePages

	// The common-mistakes lab: its counts, locks and checker (lab.go);
	// its settings are the room's.
	lab *mistakesLab

	// admission decides whether a request gets in, and how far: the
	// presenter, addresses' shares, payments' turns (admission.go).
	admission *admission
	// teaching is the guided lessons and the scheduler's puzzle.
	teaching teachingParts
	// endpoints is "bring your own endpoint": the students' servers the
	// workshop calls.
	endpoints studentEndpoints
}

// NewServer wires a server around an open store.
func NewServer(cfg Config, db Store, clock *sim.Clock) *Server {
	cfg = cfg.withDefaults()
	s := &Server{
		cfg:      cfg,
		db:       db,
		servers:  classTies{peers: cfg.Peers},
		clock:    clock,
		world:    simWorld{ledger: cfg.Ledger, faults: sim.NewFaultPlan()},
		hub:      live.New(live.DefaultSize, clock.Now),
		payments: paymentParts{sleep: pay.Sleep},
		sims:     newSimRuns(),
	}
	s.hub.SetServer(cfg.Name)
	if cfg.BoardClock != nil {
		s.hub.SetWall(cfg.BoardClock)
	}
	s.hub.SetShares(cfg.Limits.TimelinePerSource, cfg.Limits.TimelineTotal)
	if s.world.ledger == nil {
		panic("web: NewServer needs Config.Ledger (the payments store itself when it holds the ledger's tables)")
	}
	if s.servers.peers == nil {
		s.servers.peers = room.Memory()
	}
	s.room, s.servers.barriers = newRoom(s)
	s.hub.SetGeneration(s.resetGeneration)
	clock.Follow(func() time.Duration { return s.room.Load().ClockOffset })
	s.pages.answers = &answerCounts{tally: s.hub, books: db, room: s.room, shared: s.servers.peers.Shared(), logf: s.logf}
	keyPlaces := []keyScanner{db}
	if s.ledgerApart() {
		keyPlaces = append(keyPlaces, s.world.ledger)
	}
	s.lab = newMistakesLab(labSwitches{room: s.room, timeline: s.hub, workLimit: cfg.GatewayTimeout}, db, s.hub, keyPlaces, clock.Now, cfg.Retention)
	s.lab.check = &labChecker{mode: func() room.LabMode { return s.lab.Settings().Server.Mode }}
	s.pages.join = newJoinHandlers(cfg)
	s.admission = newAdmission(cfg, s.servers.peers, s.logf, s.refuseBeforeRouting)
	s.teaching.lessons = lesson.Build(cfg.LockTimeout)
	s.world.gateway = sim.NewGateway(s.world.ledger, clock.Now)
	s.world.handler = sim.NewGatewayHandler(clock.Now)
	s.payments.idleSweeps = newIdleSweeps(!s.servers.peers.Shared())
	s.payments.protocol = &pay.Service{Store: countingStorage{Storage: talliedStorage{Storage: db, t: s.lab.tally}, g: s.payments.idleSweeps}, Gateway: s.world.gateway.With(pay.GatewayFaults{}), Now: clock.Now,
		Sleep: func(ctx context.Context, d time.Duration) error { return s.payments.sleep(ctx, d) },
		WorkContext: func() (context.Context, context.CancelFunc) {
			return pay.NewWorkContext(s.life.work, s.cfg.GatewayTimeout)
		}}
	s.life.base, s.life.stop = context.WithCancel(context.Background())
	s.life.work, s.life.abandon = context.WithCancelCause(s.life.base)
	s.payments.steps = step.New(s.life.base, step.Config{Name: cfg.Name, Limit: cfg.StepLimit, Lease: cfg.LockTimeout,
		Room: s.room, Peers: s.servers.peers, Hub: s.hub, Now: s.clock.Now, Logf: s.logf, CountStep: countHeldStep(s.room),
		CountPlay: countHeldPlay(s.room), WentOnAlone: releasedAlone(s.room, s.logf)})
	s.teaching.narration = lesson.NewNarrator(s.teaching.lessons, s.room, s.hub)
	s.teaching.judge = &puzzleJudge{room: s.room, hub: s.hub, charges: orderChargeCount{s.db}.count, logf: s.logf}
	news := newWorkshopNews(s.hub)
	s.endpoints.guard, s.endpoints.workshop = newWorkshop(cfg, clock.Now, s.servers.peers, s.db, s.logf, news)
	s.admission.limits.knownGateway = s.endpoints.workshop.Known
	{
		// The workshop a restarted server carries on with: its students,
		// rows and gateways' addresses, from the room's store. A slow
		// store holds the start for restoreWait at most: the workshop
		// then starts without them and reads them in the background.
		ctx, cancel := context.WithTimeout(s.life.base, cfg.restoreWait())
		if err := s.endpoints.workshop.Restore(ctx); err != nil {
			s.logf("%v: the workshop starts without its kept students and reads them again in the background", err)
			s.endpoints.workshop.RestoreLater()
		}
		cancel()
	}
	s.endpoints.workshop.Start(s.life.base)
	// The handler groups hold what they use: make them once it all is.
	s.echo = s.routes()
	s.room.Start(s.life.base)
	booksCtx, cancelBooks := context.WithTimeout(s.life.base, 10*time.Second)
	if err := room.EnsureBooks(booksCtx, s.room); err != nil {
		s.logf("room: naming its books: %v", err)
	}
	cancelBooks()
	s.pages.answers.restart()
	go s.pages.answers.keep(s.life.base)
	s.startRelay()
	s.payments.steps.StartCommands(s.servers.relay != nil) // after the relay, whose connection may carry them
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
	return s.admission.trialBound(s.admission.inFlightBound(s.admission.refuseEarly(crossOriginGuard(bodyDeadline(s.cfg.BodyTimeout, s.echo)))))
}

// EndStreams ends every live page's event stream and refuses new ones,
// leaving the hub open: at shutdown, the payments still in flight then
// publish their steps, and the other servers sharing the database still
// hear of them, while no stream holds the HTTP server's shutdown up.
func (s *Server) EndStreams() {
	s.pages.board.endStreams()
}

// AbandonWork is for a shutdown that has waited long enough for the
// payments in flight: their work ends now, and each one still waiting on
// the gateway answers that its outcome is unknown (the key stays started,
// for the sweeper) rather than not at all when the process exits.
func (s *Server) AbandonWork() { s.life.abandon(errWorkAbandoned) }

// errWorkAbandoned is why the work of payments ended: AbandonWork.
var errWorkAbandoned = errors.New("the server is stopping and waits no longer for the work of payments in flight")

// Close ends background work and wakes every event stream; call it when
// the HTTP server has stopped accepting requests.
func (s *Server) Close() {
	s.life.stop()
	<-s.endpoints.workshop.Stopped() // its last change saved before the store closes
	s.room.Wait()
	s.payments.steps.WaitCommands()
	// The payments have answered: keep what this life counted.
	s.pages.answers.save(context.Background())
	s.hub.Close()
}

func (s *Server) logf(format string, args ...any) { s.cfg.Logger.Printf(format, args...) }

func (s *Server) routes() *echo.Echo {
	adm := s.admission
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = s.handleError
	e.Use(middleware.RecoverWithConfig(middleware.RecoverConfig{DisableErrorHandler: false}))
	e.Use(securityHeaders)
	e.Use(rememberPresenter) // before anything asks who sent the request
	if s.cfg.Name != "" {
		e.Use(servedBy(s.cfg.Name))
	}
	e.Use(adm.anonymousByAddress)                          // before anything reads the scope
	e.Use(freshConnectionPerPayment(&s.payments.attempts)) // before the lab's dispatcher, which reads the scope
	e.Use(requireClearScope)
	e.Use(adm.limits.middleware)
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
	e.GET("/static/*", handleStatic)

	presenterOnly := adm.presenter.presenterOnly
	payments := s.paymentHandlers()
	payments.routes(e)
	paymentLookups{books: s.db, orders: payments, events: s.hub, clientIP: adm.presenter.clientIP,
		reconciled: func() { s.lab.counts.reconciliations.Add(1) }}.routes(e)
	referenceHandlers{retention: s.cfg.Retention, lockTimeout: s.cfg.LockTimeout}.routes(e)
	adminHandlers{switches: s.faultSwitches(), clock: roomClock{clock: s.clock, room: s.room, timeline: s.hub}, sweeper: s.keySweeper(), reset: s.demoReset().run}.routes(e, presenterOnly)
	byo := newBYOC(s.Handler, s.cfg.BYOCClock, presenterOnly, adm.presenter.isPresenter)
	byo.routes(e)
	ws := s.workshopHandlers()
	rooms := roomVersions{room: s.room, now: s.clock.Now}
	lessons := s.guidedLessons()
	liveHandlers{board: s.live, pages: pageSource{lesson: lessons.page, lab: s.labPanel(), room: rooms}, presenter: adm.presenter, locked: s.cfg.PresenterToken != "", retention: s.cfg.Retention,
		lockTimeout: s.cfg.LockTimeout, sweepEvery: s.cfg.SweepEvery, byocInUse: byo.inUse, workshop: ws.boardView, join: s.pages.join.joinView}.routes(e)
	simHandlers{isPresenter: adm.presenter.isPresenter, priority: adm.hasPriority, clientIP: adm.presenter.clientIP, work: adm.work, runs: s.sims}.routes(e)
	simGatewayHandlers{gateway: s.world.handler, presenterToken: s.cfg.PresenterToken,
		presenterOnly: presenterOnly, requirePresenter: adm.presenter.requirePresenter}.routes(e)
	labHandlers{lab: s.lab, panel: s.labPanel(), room: rooms, lessons: lessons, faults: s.faultSwitches().currentFaults, isPresenter: adm.presenter.isPresenter,
		check: s.lab.check.runLabCheck}.routes(e, presenterOnly)
	exportHandlers{events: s.hub, isPresenter: adm.presenter.isPresenter, now: s.clock.Now}.routes(e)
	s.pages.join.routes(e)
	s.boardHandlers().routes(e, presenterOnly)
	deliveryHandlers{events: s.hub, clientIP: adm.presenter.clientIP}.routes(e)
	s.pollHandlers().routes(e, presenterOnly)
	s.puzzleHandlers().routes(e, presenterOnly)
	ws.routes(e, presenterOnly)
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

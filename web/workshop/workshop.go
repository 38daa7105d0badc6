package workshop

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"paytwice/pay"
	"paytwice/pay/check"
	"paytwice/sim"
)

// Config sets a workshop's bounds.
type Config struct {
	// Guard decides which addresses may be called; required.
	Guard *Guard
	// Workers is how many runs go at once (DefaultWorkers); Queue how
	// many may wait (DefaultQueue).
	Workers, Queue int
	// MaxStudents bounds the scoreboard, PerCaller how many students one
	// address may register.
	MaxStudents, PerAddress int
	// RunLimit bounds one run (DefaultRunLimit); RequestTimeout each of
	// its requests (DefaultRequestTimeout).
	RunLimit, RequestTimeout time.Duration
	// Now stamps the runs and the gateways' charges.
	Now func() time.Time
	// Tune, when set, adjusts every run's checker configuration: tests
	// make runs shorter with it.
	Tune func(*check.Config)
}

// Defaults of Config.
const (
	DefaultWorkers     = 2
	DefaultQueue       = 32
	DefaultMaxStudents = 200
	// DefaultPerAddress is a class's size: a class behind one router
	// shares one address, and a script without cookies is a new student
	// each time, so one address registers at most this many students and
	// holds at most this many places in the queue.
	DefaultPerAddress     = 60
	DefaultRunLimit       = 3 * time.Minute
	DefaultRequestTimeout = 5 * time.Second
	// MaxGatewayAtOnce bounds the requests one student's gateway answers
	// at once (a run's storm sends check.DefaultStorm).
	MaxGatewayAtOnce = 64
	// gatewayHost is the name the checker reaches a student's gateway by:
	// the requests never leave the process (Config.GatewayTransport).
	gatewayHost = "http://gateway.workshop.invalid"
	// reasonRunes bounds a failure's one-line reason on the board.
	reasonRunes = 180
)

// State is where a student's run stands.
type State string

// States of a student's run.
const (
	Registered State = "registered" // no run asked for yet
	Queued     State = "queued"
	Running    State = "running"
	Done       State = "done"
	NotRun     State = "not run" // the checker could not test the endpoint
)

// Workshop is the room's workshop: its students, their gateways, the
// queue of runs and the scoreboard.
type Workshop struct {
	cfg   Config
	ready chan struct{} // one token per queued run

	mu       sync.Mutex
	on       bool
	faults   sim.GatewayBaseFaults
	students map[string]*student // by the caller who registered
	bySecret map[string]*student
	perAddr  map[string]int
	order    []*student // as registered: the scoreboard's order before any run
	queue    []*student
}

// student is one student's registration, gateway and runs.
type student struct {
	who, addr, name string
	secret          string
	endpoint        *url.URL
	gw              *sim.GatewayHandler
	registered      time.Time
	run             Run
	atGateway       int  // requests from outside its gateway is answering
	first           bool // its queued run is the presenter's, ahead of the class
	hidden          bool // off the scoreboard, by the presenter
}

// Run is what the board shows of a student's latest run.
type Run struct {
	State State
	// Done, Passed and Failed count the cases decided so far, those that
	// passed and those that failed.
	Done, Passed, Failed int
	// FirstSafety is the first failure that can cost money or leak, with
	// its one-line reason; FirstFailure the first failure of any kind.
	FirstSafety, FirstFailure string
	// Message says why the checker could not test the endpoint (NotRun).
	Message string
	// Faults are the gateway's faults for everyone during the run.
	Faults            sim.GatewayBaseFaults
	Started, Finished time.Time
}

// Row is one student on the scoreboard.
type Row struct {
	Name     string
	Endpoint string
	Run      Run
	// Place is the run's place in the queue (1 is next), 0 when not
	// queued.
	Place int
	// Charges is how many charges the student's gateway holds now.
	Charges int
}

// Mine is what a student's own page shows: their row, and their
// gateway's address path for their endpoint to charge through.
type Mine struct {
	Row
	GatewayPath string
}

// Scoreboard is the whole board.
type Scoreboard struct {
	On      bool
	Faults  sim.GatewayBaseFaults
	Allowed []Allow
	Rows    []Row
	Queued  int
	Queue   int
}

// GatewayPrefix is where students' gateways are served; the secret of
// each follows it.
const GatewayPrefix = "/workshop/gw/"

// New makes a workshop, off.
func New(cfg Config) *Workshop {
	if cfg.Guard == nil {
		panic("workshop: New needs a Guard")
	}
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.Queue <= 0 {
		cfg.Queue = DefaultQueue
	}
	if cfg.MaxStudents <= 0 {
		cfg.MaxStudents = DefaultMaxStudents
	}
	if cfg.PerAddress <= 0 {
		cfg.PerAddress = DefaultPerAddress
	}
	if cfg.RunLimit <= 0 {
		cfg.RunLimit = DefaultRunLimit
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Workshop{cfg: cfg, ready: make(chan struct{}, cfg.Queue),
		students: map[string]*student{}, bySecret: map[string]*student{}, perAddr: map[string]int{}}
}

// Start runs the queue's workers until ctx ends; a run under way then
// ends too.
func (w *Workshop) Start(ctx context.Context) {
	for range w.cfg.Workers {
		go w.work(ctx)
	}
}

// On says whether the presenter has the workshop open.
func (w *Workshop) On() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.on
}

// SetOn opens or closes the workshop; closed, it takes no registration
// and no run, and keeps its scoreboard.
func (w *Workshop) SetOn(on bool) {
	w.mu.Lock()
	w.on = on
	w.mu.Unlock()
}

// SetFaults sets the failures every student's gateway gives from now on.
func (w *Workshop) SetFaults(f sim.GatewayBaseFaults) error {
	if err := f.Validate(); err != nil {
		return pay.Errorf(pay.EINVALID, "%s.", err.Error())
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.faults = f
	for _, st := range w.students {
		st.gw.SetBaseFaults(f)
	}
	return nil
}

// Register records who's endpoint under name, or changes it: addr is
// the address the request came from. The endpoint must parse and its
// address be one the room may call. The first registration makes the
// student's gateway, with a secret path of its own.
func (w *Workshop) Register(ctx context.Context, who, addr, name, rawURL string) (Mine, error) {
	if who == "" {
		return Mine{}, pay.Errorf(pay.EINVALID, "Open the workshop page in a browser, or send a bearer token: the room needs to know you again when you ask for a run.")
	}
	name, err := ParseName(name)
	if err != nil {
		return Mine{}, err
	}
	u, err := ParseEndpoint(rawURL)
	if err != nil {
		return Mine{}, err
	}
	if !w.On() {
		return Mine{}, errClosed
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	n, _ := strconv.Atoi(port)
	if err := w.cfg.Guard.CheckHost(ctx, u.Hostname(), uint16(n)); err != nil {
		return Mine{}, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, other := range w.students {
		if other.who != who && strings.EqualFold(other.name, name) {
			return Mine{}, pay.Errorf(pay.EFORBIDDEN, "Another student is called %q on the scoreboard: choose another name.", name)
		}
	}
	st, ok := w.students[who]
	if !ok {
		switch {
		case len(w.students) >= w.cfg.MaxStudents:
			return Mine{}, pay.Errorf(pay.EBUSY, "The workshop has its %d students already.", w.cfg.MaxStudents)
		case w.perAddr[addr] >= w.cfg.PerAddress:
			return Mine{}, pay.Errorf(pay.EBUSY, "Your computer has registered %d students already: keep using one of them.", w.cfg.PerAddress)
		}
		st = &student{who: who, addr: addr, secret: hex.EncodeToString(randomBytes(16)), gw: sim.NewGatewayHandler(w.cfg.Now),
			registered: w.cfg.Now(), run: Run{State: Registered}}
		st.gw.SetMaxCharges(10_000)
		st.gw.SetBaseFaults(w.faults)
		w.students[who], w.bySecret[st.secret] = st, st
		w.perAddr[addr]++
		w.order = append(w.order, st)
	}
	st.name, st.endpoint = name, u
	return w.mineLocked(st), nil
}

// errClosed refuses what only an open workshop does.
var errClosed = pay.Errorf(pay.EFORBIDDEN, "The presenter has not opened the workshop yet: wait for them to turn it on.")

// Mine is who's own view, ok false when they have not registered.
func (w *Workshop) Mine(who string) (Mine, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	st, ok := w.students[who]
	if !ok || who == "" {
		return Mine{}, false
	}
	return w.mineLocked(st), true
}

func (w *Workshop) mineLocked(st *student) Mine {
	return Mine{Row: w.rowLocked(st), GatewayPath: GatewayPrefix + st.secret}
}

// Gateway is the gateway whose secret is secret.
func (w *Workshop) Gateway(secret string) (http.Handler, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	st, ok := w.bySecret[secret]
	if !ok {
		return nil, false
	}
	return st.gw, true
}

// Known reports whether secret is a student's gateway.
func (w *Workshop) Known(secret string) bool {
	_, ok := w.Gateway(secret)
	return ok
}

// EnterGateway is the student's gateway for one request from outside,
// and leave to call when it is answered: a gateway takes at most
// MaxGatewayAtOnce requests at once, well past what a run's storm sends,
// so a loop on a student's laptop cannot tie up the room.
func (w *Workshop) EnterGateway(secret string) (h http.Handler, leave func(), err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	st, ok := w.bySecret[secret]
	if !ok {
		return nil, nil, pay.Errorf(pay.ENOTFOUND, "No student's gateway is at this address: copy it again from your workshop page.")
	}
	if st.atGateway >= MaxGatewayAtOnce {
		return nil, nil, pay.Errorf(pay.EBUSY, "Your gateway is already answering %d requests at once: wait for their answers before sending more.", MaxGatewayAtOnce)
	}
	st.atGateway++
	return st.gw, func() {
		w.mu.Lock()
		st.atGateway--
		w.mu.Unlock()
	}, nil
}

// Ask queues a run of who's endpoint: one run per student at a time, in
// a queue of bounded length.
// first puts it at the front of the queue, behind other front runs: the
// presenter's, who never waits behind the class.
func (w *Workshop) Ask(who string, first bool) (Mine, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	st, ok := w.students[who]
	switch {
	case !ok || who == "":
		return Mine{}, pay.Errorf(pay.EINVALID, "Register your endpoint's address first: the room runs the checker against it.")
	case !w.on:
		return Mine{}, errClosed
	}
	if err := w.enqueueLocked(st, first); err != nil {
		return Mine{}, err
	}
	return w.mineLocked(st), nil
}

// AskAll queues a run of every student who has none queued or running,
// as long as the queue has room: the presenter's re-run after flipping
// the faults, queued ahead of the runs students asked for. It returns
// how many were queued and how many found no room.
func (w *Workshop) AskAll() (queued, left int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, st := range w.order {
		switch err := w.enqueueLocked(st, true); {
		case err == nil:
			queued++
		case pay.ErrorCode(err) == pay.EBUSY:
			left++
		}
	}
	return queued, left
}

func (w *Workshop) enqueueLocked(st *student, first bool) error {
	switch st.run.State {
	case Queued:
		return pay.Errorf(pay.ECONFLICT, "Your run is already waiting in the queue (%s): it starts on its own.", ordinal(w.placeLocked(st)))
	case Running:
		return pay.Errorf(pay.ECONFLICT, "Your run is under way: its cases appear on the scoreboard as they finish.")
	}
	if len(w.queue) >= w.cfg.Queue {
		return pay.Errorf(pay.EBUSY, "%d runs are waiting already, the most the room queues: ask again in a minute.", len(w.queue))
	}
	if !first {
		// One address, a class behind one router among them, holds at most
		// PerAddress places: one student per place.
		n := 0
		for _, q := range w.queue {
			if q.addr == st.addr {
				n++
			}
		}
		if n >= w.cfg.PerAddress {
			return pay.Errorf(pay.EBUSY, "%d runs from your computer's address are waiting already: ask again when one has started.", n)
		}
	}
	if first {
		at := 0
		for at < len(w.queue) && w.queue[at].first {
			at++
		}
		w.queue = append(w.queue[:at], append([]*student{st}, w.queue[at:]...)...)
	} else {
		w.queue = append(w.queue, st)
	}
	st.first = first
	st.run = Run{State: Queued}
	w.ready <- struct{}{} // never blocks: one token per queued run, at most Queue
	return nil
}

func (w *Workshop) placeLocked(st *student) int {
	for i, q := range w.queue {
		if q == st {
			return i + 1
		}
	}
	return 0
}

// work runs queued runs, one at a time, until ctx ends.
func (w *Workshop) work(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.ready:
		}
		w.mu.Lock()
		if len(w.queue) == 0 {
			w.mu.Unlock()
			continue
		}
		st := w.queue[0]
		w.queue = w.queue[1:]
		st.run = Run{State: Running, Faults: w.faults, Started: w.cfg.Now()}
		cfg := w.checkConfigLocked(st)
		w.mu.Unlock()
		w.runOne(ctx, st, cfg)
	}
}

// checkConfigLocked is the checker's configuration for st's run: the
// student's gateway as the oracle, reached in process; the endpoint
// reached only through the guard, redirects not followed; the checker's
// own bounds on headers and bodies, and a time-out on every request.
func (w *Workshop) checkConfigLocked(st *student) check.Config {
	cfg := check.Config{
		URL:              st.endpoint.String(),
		Gateway:          gatewayHost,
		GatewayTransport: handlerTransport{st.gw},
		Dial:             w.cfg.Guard.DialContext,
		NoRedirects:      true,
		Header:           http.Header{"Authorization": {"Bearer ws-" + hex.EncodeToString(randomBytes(12))}},
		OtherAuth:        "Bearer ws-" + hex.EncodeToString(randomBytes(12)),
		Seed:             binary.LittleEndian.Uint64(randomBytes(8)),
		Unguessable:      true,
		Timeout:          w.cfg.RequestTimeout,
		Patience:         15 * time.Second,
		VerifyTimeout:    10 * time.Second,
	}
	if w.cfg.Tune != nil {
		w.cfg.Tune(&cfg)
	}
	return cfg
}

func (w *Workshop) runOne(ctx context.Context, st *student, cfg check.Config) {
	server := ctx // ends when the server stops
	ctx, cancel := context.WithTimeout(ctx, w.cfg.RunLimit)
	defer cancel()
	cfg.OnResult = func(res check.Result) {
		w.mu.Lock()
		defer w.mu.Unlock()
		st.run.note(res)
	}
	rep, err := check.Run(ctx, cfg)
	w.mu.Lock()
	defer w.mu.Unlock()
	st.run.Finished = w.cfg.Now()
	st.run.finish(rep, err, server.Err() != nil, ctx.Err() != nil, w.cfg.RunLimit)
}

// finish records how a run ended: err is the checker's, stopped says the
// server stopped during the run, overran that the run reached limit.
func (r *Run) finish(rep *check.Report, err error, stopped, overran bool, limit time.Duration) {
	cut := err != nil && !errors.Is(err, check.ErrUnreachable) && !errors.Is(err, check.ErrNotAccepted)
	switch {
	case cut && stopped:
		r.State, r.Message = NotRun, "The server stopped during the run: its cases so far are shown, the rest were never tried."
	case cut && overran:
		r.State, r.Message = NotRun, fmt.Sprintf("The run took longer than the %s the room gives one: its cases so far are shown.", limit)
	case errors.Is(err, check.ErrNotAccepted):
		// What answered may be no payment endpoint at all: the open board
		// names the kind of failure, never a word of the answer.
		r.State, r.Message = NotRun, "The checker could not test your endpoint: "+notAccepted(err)
	case err != nil:
		r.State, r.Message = NotRun, "The checker could not test your endpoint: "+oneLine(err.Error())
	default:
		r.State = Done
		if rep != nil && rep.Linearizability.Result == "violation" {
			// The history check is one more case, and it failed.
			r.Done++
			r.Failed++
			why := "the history of the run has no legal order: one action was charged or answered as no single payment could be (" + strings.Join(rep.Linearizability.Groups, ", ") + ")"
			if r.FirstSafety == "" {
				r.FirstSafety = oneLine(why)
			}
			if r.FirstFailure == "" {
				r.FirstFailure = oneLine(why)
			}
		}
	}
}

// notAccepted says how an endpoint failed to take a first good payment,
// quoting nothing it answered.
func notAccepted(err error) string {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "gave no answer"):
		return "it was reached, but gave no answer to a first good payment."
	case strings.Contains(msg, "was reached, but"):
		return "it was reached, but its answer to a first good payment was past the room's bounds."
	}
	return "it answered a first good payment with no success, so it is not taking payments as the workshop's are sent (try paytwice check against it on your own computer)."
}

// note counts one case's verdict.
func (r *Run) note(res check.Result) {
	r.Done++
	switch res.Verdict {
	case check.Pass:
		r.Passed++
	case check.Fail:
		r.Failed++
		why := oneLine(fmt.Sprintf("case %d, %s: %s", res.Case, res.Name, res.Detail))
		if res.Safety && r.FirstSafety == "" {
			r.FirstSafety = why
		}
		if r.FirstFailure == "" {
			r.FirstFailure = why
		}
	}
}

// Scoreboard is every student's row, in the order they registered.
func (w *Workshop) Scoreboard() Scoreboard {
	w.mu.Lock()
	defer w.mu.Unlock()
	b := Scoreboard{On: w.on, Faults: w.faults, Allowed: w.cfg.Guard.Allowed(), Queued: len(w.queue), Queue: w.cfg.Queue}
	for _, st := range w.order {
		if !st.hidden {
			b.Rows = append(b.Rows, w.rowLocked(st))
		}
	}
	return b
}

// Hide takes the student called name off the scoreboard, as the
// presenter does with a name or a reason unfit for the projector; their
// gateway and own page go on. It reports whether such a student was
// shown.
func (w *Workshop) Hide(name string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, st := range w.order {
		if st.name == name && !st.hidden {
			st.hidden = true
			return true
		}
	}
	return false
}

func (w *Workshop) rowLocked(st *student) Row {
	l := st.gw.Ledger()
	return Row{Name: st.name, Endpoint: st.endpoint.String(), Run: st.run, Place: w.placeLocked(st), Charges: l.Charges}
}

// oneLine is s's first line, cut to reasonRunes.
func oneLine(s string) string {
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		s = s[:i]
	}
	if utf8.RuneCountInString(s) <= reasonRunes {
		return s
	}
	return string([]rune(s)[:reasonRunes-1]) + "…"
}

func ordinal(n int) string {
	suffix := "th"
	switch {
	case n%100 >= 11 && n%100 <= 13:
	case n%10 == 1:
		suffix = "st"
	case n%10 == 2:
		suffix = "nd"
	case n%10 == 3:
		suffix = "rd"
	}
	return strconv.Itoa(n) + suffix
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

// handlerTransport serves the checker's requests to a student's gateway
// in process: its books and switches are the room's own, never reached
// over the network.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	in := req.Clone(req.Context())
	in.RequestURI = req.URL.RequestURI()
	t.h.ServeHTTP(rec, in)
	res := rec.Result()
	res.Request = req
	return res, nil
}

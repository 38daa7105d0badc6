package workshop

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

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
	// MaxStudents bounds the scoreboard, PerAddress how many students one
	// address may register and how many places in the queue it may hold;
	// it is below Queue, so that one address never fills the queue.
	MaxStudents, PerAddress int
	// RunLimit bounds one run (DefaultRunLimit); RequestTimeout each of
	// its requests (DefaultRequestTimeout).
	RunLimit, RequestTimeout time.Duration
	// Now stamps the runs and the gateways' charges.
	Now func() time.Time
	// After is the clock a run's limit is kept on (time.After): a test
	// ends a run at the moment it chooses instead of waiting out a limit
	// long enough for a loaded machine.
	After func(time.Duration) <-chan time.Time
	// Tune, when set, adjusts every run's checker configuration: tests
	// make runs shorter with it.
	Tune func(*check.Config)
	// Keeper, when set, is where the workshop's state outlives this
	// server (the room's store): Restore reads it, and changes are saved
	// to it, at most one save per SaveEvery.
	Keeper Keeper
	// SaveEvery is the least time between two saves while changes keep
	// coming (DefaultSaveEvery): a loop on a gateway costs the store at
	// most one write per SaveEvery.
	SaveEvery time.Duration
	// ReadAgainEvery is how often the saver reads the kept workshop again
	// after Restore could not (DefaultReadAgainEvery), each read bounded
	// by as long.
	ReadAgainEvery time.Duration
	// Logf reports what could not be saved.
	Logf func(format string, args ...any)
	// Announce, when set, tells the other servers sharing the keeper that
	// the settings (open or closed, the faults) are kept at a new
	// version: each of them reads them at once when told
	// (SettingsNotified), instead of at its next save or board.
	Announce func(ctx context.Context, version int64) error
	// Changed, when set, is called at each change of what the scoreboard
	// shows, with the workshop's lock held: it must neither block nor
	// call the workshop. Saved, when set, is called after a save that
	// wrote changes to the keeper, where the other servers sharing it
	// read them from then on.
	Changed, Saved func()
	// Books, when set, keeps the books of every student's gateway (the
	// room's store): each charge is written there before the gateway
	// answers, so a restarted server's gateways, and another server's,
	// know every charge and key they took. Without, the books live in
	// this server's memory.
	Books Books
	// BooksCap bounds each student's gateway's books (DefaultBooksCap):
	// a new charge past it prunes the oldest, counted as pruned.
	BooksCap int
}

// Books keeps the charges of each student's gateway, the student named by
// their gateway's secret: pay.Store on SQLite and PostgreSQL.
type Books interface {
	RecordWorkshopCharge(ctx context.Context, student string, c pay.GatewayCharge, keep int) (pay.GatewayCharge, bool, pay.WorkshopTally, error)
	WorkshopChargesByOrder(ctx context.Context, student, orderID string, limit int) ([]pay.GatewayCharge, int, error)
	WorkshopCharges(ctx context.Context, student string, limit int) ([]pay.GatewayCharge, pay.WorkshopTally, error)
	WorkshopTallies(ctx context.Context) (map[string]pay.WorkshopTally, error)
	DeleteWorkshopBooks(ctx context.Context, students ...string) error
}

// Keeper keeps the workshop's state, an opaque JSON document to it: the
// room's store (SQLite or PostgreSQL), through room.Peers. UpdateWorkshop
// reads and replaces it under the store's lock, so that servers sharing
// the store merge their students into it instead of overwriting them.
type Keeper interface {
	LoadWorkshop(ctx context.Context) ([]byte, error)
	UpdateWorkshop(ctx context.Context, change func(old []byte) ([]byte, error)) error
}

// Defaults of Config.
const (
	DefaultWorkers = 2
	// DefaultQueue holds a whole class behind one router (DefaultPerAddress)
	// with a few places to spare for everyone else: the presenter's "run
	// everyone again" queues a full class.
	DefaultQueue       = 64
	DefaultMaxStudents = 200
	// DefaultPerAddress is a class's size: a class behind one router
	// shares one address, and a script without cookies is a new student
	// each time, so one address registers at most this many students and
	// holds at most this many places in the queue.
	DefaultPerAddress     = 60
	DefaultRunLimit       = 3 * time.Minute
	DefaultRequestTimeout = 5 * time.Second
	DefaultSaveEvery      = 500 * time.Millisecond
	DefaultReadAgainEvery = 2 * time.Second
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
	// Interrupted is a run the server stopped in the middle of (or
	// before it started): neither passed nor failed, its cases so far
	// shown.
	Interrupted State = "interrupted"
)

// Workshop is the room's workshop: its students, their gateways, the
// queue of runs and the scoreboard.
type Workshop struct {
	cfg   Config
	ready chan struct{} // one token per queued run
	// tallies is the books' last count of every gateway, shared by the
	// boards fetched within talliesFresh of it.
	tallies talliesCache

	mu       sync.Mutex
	on       bool
	faults   sim.GatewayBaseFaults
	students map[string]*student // by the caller who registered
	bySecret map[string]*student
	perAddr  map[string]int
	order    []*student // as registered: the scoreboard's order before any run
	queue    []*student

	// changes counts the changes made, saved the ones the keeper holds;
	// dirty wakes the saver.
	changes, saved uint64
	dirty          chan struct{}
	// recheck wakes the saver to read the kept settings: another server
	// announced newer ones.
	recheck chan struct{}
	// settings is the version of on and faults as kept (0 before any);
	// settingsChanged says the presenter changed them here since the
	// last save, which then writes them as the next version.
	settings        int64
	settingsChanged bool
	// allowedSet says the networks the guard calls are the presenter's
	// (SetAllowed, here or kept), not those this server started with.
	allowedSet bool
	// unread says the kept workshop is still to be read: Restore could
	// not, and the saver reads it again.
	unread bool
	// remembered are the secrets of the students the presenter removed
	// here, newest last, at most maxRemembered; unbooked those whose
	// books are still to be deleted.
	remembered []string
	unbooked   []unbooked
	// workers are the queue's workers; stopped is closed once they and
	// the saver are done.
	workers sync.WaitGroup
	stopped chan struct{}
}

// student is one student's registration, gateway and runs.
type student struct {
	who, addr, name string
	secret          string
	endpoint        *url.URL
	gw              *sim.GatewayHandler
	// fence stands between its gateway's charges and Config.Books: a
	// removal closes it.
	fence      *booksFence
	registered time.Time
	run        Run
	atGateway  int  // requests from outside its gateway is answering
	first      bool // its queued run is the presenter's, ahead of the class
	hidden     bool // off the scoreboard, by the presenter
	// chargesBefore are the charges its gateway held when this server
	// last stopped, where the books are in memory only (no Config.Books):
	// such a restarted gateway's books start empty.
	chargesBefore int
	// charges is what its gateway's books held when last counted: a
	// request to the gateway is a change to keep only when they moved.
	charges int
}

// Mine is what a student's own page shows: their row, and their
// gateway's address path for their endpoint to charge through.
type Mine struct {
	Row
	GatewayPath string
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
	if cfg.After == nil {
		cfg.After = time.After
	}
	if cfg.SaveEvery <= 0 {
		cfg.SaveEvery = DefaultSaveEvery
	}
	if cfg.ReadAgainEvery <= 0 {
		cfg.ReadAgainEvery = DefaultReadAgainEvery
	}
	if cfg.BooksCap <= 0 {
		cfg.BooksCap = DefaultBooksCap
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	return &Workshop{cfg: cfg, ready: make(chan struct{}, cfg.Queue), dirty: make(chan struct{}, 1), recheck: make(chan struct{}, 1), stopped: make(chan struct{}),
		students: map[string]*student{}, bySecret: map[string]*student{}, perAddr: map[string]int{}}
}

// Start runs the queue's workers, and the saver when there is a keeper,
// until ctx ends; a run under way then ends too, shown as interrupted,
// and the last change is saved. Stopped is closed then.
func (w *Workshop) Start(ctx context.Context) {
	for range w.cfg.Workers {
		w.workers.Add(1)
		go func() {
			defer w.workers.Done()
			w.work(ctx)
		}()
	}
	go func() {
		defer close(w.stopped)
		if w.cfg.Keeper == nil {
			w.workers.Wait()
			return
		}
		w.keep(ctx)
	}()
}

// Stopped is closed once the workers have stopped and the last change is
// saved: the server waits for it before closing its store.
func (w *Workshop) Stopped() <-chan struct{} { return w.stopped }

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
	w.settingsChanged = true
	w.changedLocked()
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
	w.settingsChanged = true
	w.changedLocked()
	return nil
}

// SetAllowed replaces the networks the room calls students' endpoints on,
// for every server sharing the keeper: kept with the settings and
// announced, they outlive a restart and win over the networks a server
// was started with (-workshop-allow or its default).
func (w *Workshop) SetAllowed(allowed []Allow) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.cfg.Guard.SetAllowed(allowed)
	w.allowedSet = true
	w.settingsChanged = true
	w.changedLocked()
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
		secret := hex.EncodeToString(randomBytes(16))
		st = &student{who: who, addr: addr, secret: secret, registered: w.cfg.Now(), run: Run{State: Registered}}
		st.gw, st.fence = w.newGateway(secret, nil, sim.GatewayTally{})
		w.students[who], w.bySecret[st.secret] = st, st
		w.perAddr[addr]++
		w.order = append(w.order, st)
	}
	st.name, st.endpoint = name, u
	w.changedLocked()
	return w.mineLocked(st), nil
}

// ErrStarting answers a gateway this server does not know while it has
// not read the kept workshop yet: the gateway may well be a kept
// student's, so the student's server is asked to send the same request
// again (Retry-After, ReadAgainEvery), not told to copy the address
// again.
var ErrStarting = pay.Errorf(pay.EUNAVAILABLE, "The room is starting: it has not read its workshop's students yet, so this gateway is not known yet. Send the same request again after the Retry-After seconds; nothing was charged.")

// ReadAgainEvery is how often the kept workshop is read again while it
// is unread: a gateway answered ErrStarting is worth asking again then.
func (w *Workshop) ReadAgainEvery() time.Duration { return w.cfg.ReadAgainEvery }

// errClosed refuses what only an open workshop does.
var errClosed = pay.Errorf(pay.EFORBIDDEN, "The workshop is closed: registering and runs wait until the presenter opens it.")

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
	if !ok && w.unread {
		return nil, nil, ErrStarting
	}
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
		// Only a request that moved its books is a change to keep: a
		// loop of reads costs the store nothing.
		if l := st.gw.Ledger(); l.Charges+int(l.Pruned) != st.charges {
			st.charges = l.Charges + int(l.Pruned)
			w.changedLocked()
		}
		w.mu.Unlock()
	}, nil
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

package sim

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"time"
)

// Parameters of the thundering-herd model, taken from the AWS Architecture
// Blog post "Exponential Backoff And Jitter", so the curves can be compared
// with the post's charts.
const (
	// HerdBase and HerdCap are the backoff base and cap used when a
	// HerdConfig leaves them zero.
	HerdBase = 5 * time.Millisecond
	HerdCap  = 2000 * time.Millisecond
	// HopMean and HopStdDev describe one network hop: |Normal(10 ms, 2 ms)|.
	HopMean   = 10 * time.Millisecond
	HopStdDev = 2 * time.Millisecond
)

// Bounds that keep one simulation request from occupying a server.
const (
	// MaxHerdClients bounds one herd. Herds up to MaxEventHerdClients are
	// computed event by event, larger ones by counting (herdcount.go).
	MaxHerdClients = 100_000
	MaxHerdTrials  = 1000
	// MaxHerdRuns bounds points × strategies × trials of one sweep.
	MaxHerdRuns = 100000
	// MaxHerdEvents stops a single run that has not finished after this many
	// events (time steps in a counted herd); the result is then marked
	// Truncated. It is far above what any strategy needs at MaxHerdClients,
	// so it only guards against a bug or an absurd backoff cap turning into
	// an endless loop.
	MaxHerdEvents = 50_000_000
)

// HerdConfig describes one run of the thundering-herd simulation.
//
// The model (optimistic concurrency on one row): Clients clients start at
// t = 0. Each reads the row's version (one hop to the server, one back) and
// then sends a write conditional on that version (one hop there, one back).
// The server applies a write only if the version is unchanged, and bumps it;
// otherwise the write fails, and the client backs off (attempt n = 1 for its
// first retry, 2 for the next, ...) and starts over with a fresh read. A
// client is done when its successful write's reply arrives.
type HerdConfig struct {
	Clients  int      `json:"clients"`
	Strategy Strategy `json:"strategy"`
	// Base and Cap of the backoff; zero means HerdBase and HerdCap.
	Base time.Duration `json:"base_ns"`
	Cap  time.Duration `json:"cap_ns"`
	Seed uint64        `json:"seed"`
}

// HerdResult is the outcome of one run.
type HerdResult struct {
	Config HerdConfig `json:"config"`
	// Work is the number of write calls the server received: the cost of
	// contention that the strategies try to cut.
	Work int `json:"work"`
	// CompletionTime is when the last client's successful reply arrived.
	CompletionTime time.Duration `json:"completion_ns"`
	// Succeeded is the number of clients whose write went through; it equals
	// Clients unless the run was Truncated.
	Succeeded int `json:"succeeded"`
	// Events is the number of simulation events processed.
	Events int `json:"events"`
	// Truncated is true if the run hit MaxHerdEvents before every client
	// succeeded; Work and CompletionTime then describe the partial run.
	Truncated bool `json:"truncated"`
}

// withDefaults fills zero Base/Cap and checks the config.
func (c HerdConfig) withDefaults() (HerdConfig, error) {
	if c.Base == 0 {
		c.Base = HerdBase
	}
	if c.Cap == 0 {
		c.Cap = HerdCap
	}
	if c.Clients < 1 || c.Clients > MaxHerdClients {
		return c, &ParamError{Field: "clients", Msg: fmt.Sprintf("must be between 1 and %d", MaxHerdClients)}
	}
	if err := c.policy().Validate(); err != nil {
		return c, err
	}
	if c.Clients > MaxEventHerdClients && c.Cap > MaxCountedHerdCap {
		return c, &ParamError{Field: "cap", Msg: fmt.Sprintf("must be at most %v for a herd of more than %d clients", MaxCountedHerdCap, MaxEventHerdClients)}
	}
	return c, nil
}

func (c HerdConfig) policy() Policy {
	return Policy{Base: c.Base, Cap: c.Cap, Strategy: c.Strategy}
}

// RunHerd runs one seeded simulation. The same config always gives the same
// result. It returns a *ParamError for a bad config.
func RunHerd(cfg HerdConfig) (HerdResult, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return HerdResult{}, err
	}
	var s herdRunner
	return s.run(cfg), nil
}

// herdRunner computes a herd event by event up to MaxEventHerdClients
// clients and by counting above, keeping the buffers of both for a sweep.
type herdRunner struct {
	events  herdSim
	counted countedHerd
}

func (r *herdRunner) run(cfg HerdConfig) HerdResult {
	if cfg.Clients > MaxEventHerdClients {
		return r.counted.run(cfg)
	}
	return r.events.run(cfg)
}

// Event kinds: the moment a request reaches the server. Replies carry no
// server-side effect, so they are folded into the next arrival's time.
const (
	evRead int32 = iota
	evWrite
)

// event is the single pending event of one client (every client has exactly
// one until it is done, so the queue never holds more than Clients events).
type event struct {
	at     time.Duration
	client int32
	kind   int32
}

// eventQueue is a min-heap on (at, client); the client index breaks ties so
// the order is total and the run deterministic. The root is replaced in
// place and sifted down (fixRoot), so nothing is allocated per event, and
// the heap is this type's own rather than container/heap's: its calls
// through heap.Interface (a Less and a Swap for each level) were some two
// fifths of a sweep's processor time. It moves elements exactly as container/heap does, so
// runs are the same event for event.
type eventQueue []event

// before orders the queue: by time, then by client.
func before(a, b event) bool {
	return a.at < b.at || (a.at == b.at && a.client < b.client)
}

// init orders q as a heap (container/heap's Init).
func (q eventQueue) init() {
	for i := len(q)/2 - 1; i >= 0; i-- {
		q.down(i)
	}
}

// fixRoot restores the heap after its root changed (container/heap's
// Fix(h, 0): at the root there is nothing above to go up to).
func (q eventQueue) fixRoot() { q.down(0) }

// down sifts the element at i down to its place, as container/heap's
// down does: the smaller child goes up while it is before the element.
func (q eventQueue) down(i int) {
	n := len(q)
	for {
		j := 2*i + 1
		if j >= n {
			return
		}
		if j2 := j + 1; j2 < n && before(q[j2], q[j]) {
			j = j2
		}
		if !before(q[j], q[i]) {
			return
		}
		q[i], q[j] = q[j], q[i]
		i = j
	}
}

// herdSim holds the buffers of a run so a sweep can reuse them.
type herdSim struct {
	q        eventQueue
	readVer  []int64
	attempts []int32
	prev     []time.Duration
	rnd      *rand.Rand
	pcg      *rand.PCG
	// yield, when set, is called every herdYieldEvents events of a run
	// (HerdSweepConfig.Yield): one trial of a large herd takes several
	// milliseconds, and Go's scheduler looks at the network only when a
	// goroutine stops (or every 10 ms), so a sweep yielding between
	// trials alone kept a request that had arrived waiting that long.
	yield func()
}

// herdYieldEvents is how many events a run processes between two calls
// of its yield: a fraction of a millisecond.
const herdYieldEvents = 1024

func (s *herdSim) hop() time.Duration {
	return time.Duration(math.Abs(s.rnd.NormFloat64()*float64(HopStdDev) + float64(HopMean)))
}

func (s *herdSim) run(cfg HerdConfig) HerdResult {
	n := cfg.Clients
	if s.pcg == nil {
		s.pcg = rand.NewPCG(0, 0)
		s.rnd = rand.New(s.pcg)
	}
	s.pcg.Seed(cfg.Seed, 0x4e7d_0b5e)
	s.q = s.q[:0]
	s.readVer = resize(s.readVer, n)
	s.attempts = resize(s.attempts, n)
	s.prev = resize(s.prev, n)
	p := cfg.policy()
	for i := range n {
		s.attempts[i] = 0
		s.prev[i] = p.Base
		s.q = append(s.q, event{at: s.hop(), client: int32(i), kind: evRead})
	}
	s.q.init()

	res := HerdResult{Config: cfg}
	var version int64
	for len(s.q) > 0 {
		if res.Events >= MaxHerdEvents {
			res.Truncated = true
			break
		}
		res.Events++
		if s.yield != nil && res.Events%herdYieldEvents == 0 {
			s.yield()
		}
		e := &s.q[0]
		c := e.client
		switch e.kind {
		case evRead:
			// The server reads the version; the reply goes back and the
			// client sends its conditional write at once.
			s.readVer[c] = version
			e.at += s.hop() + s.hop()
			e.kind = evWrite
		case evWrite:
			res.Work++
			if s.readVer[c] == version {
				version++
				res.Succeeded++
				res.CompletionTime = max(res.CompletionTime, e.at+s.hop())
				last := len(s.q) - 1
				s.q[0] = s.q[last]
				s.q = s.q[:last]
				if last == 0 {
					continue
				}
			} else {
				s.attempts[c]++
				w := p.Wait(int(s.attempts[c]), s.prev[c], s.rnd)
				s.prev[c] = w
				// failure reply, backoff sleep, then the new read's hop
				e.at += s.hop() + w + s.hop()
				e.kind = evRead
			}
		}
		s.q.fixRoot()
	}
	return res
}

func resize[T any](b []T, n int) []T {
	if cap(b) < n {
		return make([]T, n)
	}
	return b[:n]
}

// HerdSweepConfig describes a sweep: every strategy at every client count
// from MinClients to MaxClients in steps of Step, Trials runs each.
type HerdSweepConfig struct {
	MinClients int `json:"min_clients"`
	MaxClients int `json:"max_clients"`
	Step       int `json:"step"`
	Trials     int `json:"trials"`
	// Strategies to run; empty means all of Strategies().
	Strategies []Strategy `json:"strategies"`
	// Base and Cap of the backoff; zero means HerdBase and HerdCap.
	Base time.Duration `json:"base_ns"`
	Cap  time.Duration `json:"cap_ns"`
	Seed uint64        `json:"seed"`
	// Workers is the number of goroutines; 0 means GOMAXPROCS. The result
	// does not depend on it.
	Workers int `json:"-"`
	// Yield, when set, is called before every trial, and within a trial
	// every herdYieldEvents events, and may wait: a server uses it to let
	// more urgent work have the core first. The result does not depend on
	// it.
	Yield func(context.Context) `json:"-"`
}

// DefaultHerdSweep is the AWS post's experiment: 10 to 190 clients in steps
// of 10, 100 trials, all five strategies.
func DefaultHerdSweep() HerdSweepConfig {
	return HerdSweepConfig{MinClients: 10, MaxClients: 190, Step: 10, Trials: 100, Seed: 1}
}

// HerdPoint is the average over Trials runs of one strategy at one client
// count.
type HerdPoint struct {
	Clients  int      `json:"clients"`
	Strategy Strategy `json:"strategy"`
	Trials   int      `json:"trials"`
	// MeanWork is the mean number of write calls per run.
	MeanWork float64 `json:"mean_work"`
	// MeanCompletion is the mean time until the last client succeeded.
	MeanCompletion time.Duration `json:"mean_completion_ns"`
	// Truncated counts runs stopped by MaxHerdEvents (normally 0).
	Truncated int `json:"truncated"`
}

// Validate checks the sweep and returns a *ParamError naming the first bad
// field, or nil.
func (c HerdSweepConfig) Validate() error {
	switch {
	case c.MinClients < 1 || c.MinClients > MaxHerdClients:
		return &ParamError{Field: "min_clients", Msg: fmt.Sprintf("must be between 1 and %d", MaxHerdClients)}
	case c.MaxClients < c.MinClients || c.MaxClients > MaxHerdClients:
		return &ParamError{Field: "max_clients", Msg: fmt.Sprintf("must be between min_clients (%d) and %d", c.MinClients, MaxHerdClients)}
	case c.Step < 1:
		return &ParamError{Field: "step", Msg: "must be at least 1"}
	case c.Trials < 1 || c.Trials > MaxHerdTrials:
		return &ParamError{Field: "trials", Msg: fmt.Sprintf("must be between 1 and %d", MaxHerdTrials)}
	case c.Workers < 0:
		return &ParamError{Field: "workers", Msg: "must not be negative"}
	}
	for _, st := range c.Strategies {
		if !st.Valid() {
			return &ParamError{Field: "strategies", Msg: fmt.Sprintf("unknown backoff strategy %q (want one of %s)", st, strategyNames())}
		}
	}
	points := (c.MaxClients-c.MinClients)/c.Step + 1
	if runs := points * len(c.strategies()) * c.Trials; runs > MaxHerdRuns {
		return &ParamError{Field: "trials", Msg: fmt.Sprintf("%d runs requested (points × strategies × trials); at most %d", runs, MaxHerdRuns)}
	}
	_, err := HerdConfig{Clients: c.MaxClients, Strategy: FullJitter, Base: c.Base, Cap: c.Cap}.withDefaults()
	return err
}

func (c HerdSweepConfig) strategies() []Strategy {
	if len(c.Strategies) == 0 {
		return Strategies()
	}
	return c.Strategies
}

// TrialSeed derives the seed of one run of a sweep from the sweep's seed, the
// client count and the trial number. It does not depend on the strategy, so
// every strategy meets the same random network (common random numbers),
// which makes the comparison between strategies fairer at the same cost.
func TrialSeed(seed uint64, clients, trial int) uint64 {
	return splitmix64(seed ^ splitmix64(uint64(clients)<<32|uint64(uint32(trial))))
}

func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// HerdSweep runs the sweep and returns one point per client count and
// strategy, ordered by client count, then in the order of cfg.Strategies (or
// Strategies()). The result depends only on cfg, not on Workers or timing.
// It stops early with ctx.Err() when ctx is cancelled, and returns a
// *ParamError for a bad config.
func HerdSweep(ctx context.Context, cfg HerdSweepConfig) ([]HerdPoint, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	strats := cfg.strategies()
	var points []HerdPoint
	for n := cfg.MinClients; n <= cfg.MaxClients; n += cfg.Step {
		for _, st := range strats {
			points = append(points, HerdPoint{Clients: n, Strategy: st, Trials: cfg.Trials})
		}
	}
	workers := cfg.Workers
	if workers == 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	workers = min(workers, len(points))

	// Workers take whole points, largest first so the slow ones start early;
	// each point sums its trials in order, so the floats are reproducible.
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			var s herdRunner
			if cfg.Yield != nil {
				s.events.yield = func() { cfg.Yield(ctx) }
			}
			for i := range jobs {
				pt := &points[i]
				var work, done float64
				for t := range cfg.Trials {
					if cfg.Yield != nil {
						cfg.Yield(ctx)
					}
					if ctx.Err() != nil {
						return
					}
					r := s.run(HerdConfig{Clients: pt.Clients, Strategy: pt.Strategy, Base: cfg.Base, Cap: cfg.Cap,
						Seed: TrialSeed(cfg.Seed, pt.Clients, t)}.mustDefaults())
					work += float64(r.Work)
					done += float64(r.CompletionTime)
					if r.Truncated {
						pt.Truncated++
					}
				}
				pt.MeanWork = work / float64(cfg.Trials)
				pt.MeanCompletion = time.Duration(math.Round(done / float64(cfg.Trials)))
			}
		})
	}
feed:
	for i := len(points) - 1; i >= 0; i-- {
		select {
		case jobs <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return points, nil
}

// mustDefaults fills defaults of a config that Validate already accepted.
func (c HerdConfig) mustDefaults() HerdConfig {
	if c.Base == 0 {
		c.Base = HerdBase
	}
	if c.Cap == 0 {
		c.Cap = HerdCap
	}
	return c
}

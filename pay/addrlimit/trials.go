package addrlimit

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
)

// Trials lets a few connections in past their address's share, each on
// trial until its first request says who sent it: kept, and counted in
// the presenter's reserve, when that request is the presenter's (by the
// cookie or the right token); refused and closed otherwise. A connection
// arrives before any request, so at accept the presenter cannot be told
// from the students behind the same address (a school's NAT): a reserve
// kept by address alone would be theirs to fill, and the presenter's
// first request from an address already full would get none.
//
// A student who fills the trials with connections that send nothing
// holds none of them for long: when TrialsAtOnce are undecided, the
// oldest is closed to make room for the next. The presenter's browser
// sends its request as soon as it connects, so its connection is decided
// long before that many more arrive.
type Trials struct {
	most int
	mu   sync.Mutex
	// byRemote holds every connection on trial or closed to make room and
	// not yet closed by its server, by its remote address (a request's
	// RemoteAddr); waiting the undecided ones, oldest first.
	byRemote map[string]*trialConn
	waiting  []*trialConn
	// held is len(byRemote), read without the lock: while no connection
	// is on trial, which is nearly always, a request costs no lock.
	held atomic.Int64
}

// TrialsAtOnce is how many connections may be on trial, undecided, at
// once on a server: a presenter's browser opens up to six.
const TrialsAtOnce = 16

// NewTrials keeps at most most connections on trial at once.
func NewTrials(most int) *Trials {
	return &Trials{most: max(1, most), byRemote: make(map[string]*trialConn)}
}

// The states of a connection on trial.
const (
	undecided = iota
	deciding  // its first request is being looked at
	kept      // the presenter's, counted in its address's reserve
	refused   // not the presenter's, or closed to make room
)

// trialConn is a connection past its address's share, on trial.
type trialConn struct {
	net.Conn
	addr, remote string
	trials       *Trials
	counts       *Counts
	state        int // under trials.mu
	closed       bool
}

// admit takes c, from addr and past its share in counts, on trial,
// closing the oldest undecided connection when the trials are full.
func (t *Trials) admit(c net.Conn, addr string, counts *Counts) net.Conn {
	tc := &trialConn{Conn: c, addr: addr, remote: c.RemoteAddr().String(), trials: t, counts: counts}
	var oldest *trialConn
	t.mu.Lock()
	if len(t.waiting) >= t.most {
		oldest = t.waiting[0]
		t.waiting = t.waiting[1:]
		oldest.state = refused
	}
	t.waiting = append(t.waiting, tc)
	t.byRemote[tc.remote] = tc
	t.held.Store(int64(len(t.byRemote)))
	t.mu.Unlock()
	if oldest != nil {
		// Its server closes the trialConn when its read fails: until then
		// it stays in byRemote, refused, so that a request already read
		// from it is refused too.
		_ = oldest.Conn.Close()
	}
	return tc
}

// Decide says whether the request whose connection comes from remote (a
// request's RemoteAddr) may go on. A connection not on trial may; one on
// trial is decided by its first request: kept when presenter says that
// request is the presenter's and the reserve of the connection's address
// has room, and refused otherwise. A refused request is to be answered
// with Refuse, which closes its connection. presenter is called only for
// a connection on trial, at most once per connection.
func (t *Trials) Decide(remote string, presenter func() bool) bool {
	trial, ok := t.Begin(remote)
	if trial == nil {
		return ok
	}
	return trial.Give(presenter())
}

// Trial is the trial of one connection, begun by its first request.
type Trial struct {
	t    *Trials
	tc   *trialConn
	once sync.Once
	kept bool
}

// Begin begins the trial of the connection remote comes from, for its
// first request, when it is on trial: the caller gives the verdict
// (Trial.Give) once it knows whether the request is the presenter's.
// trial is nil for a connection not on trial, or decided already: ok
// then says whether the request may go on.
func (t *Trials) Begin(remote string) (trial *Trial, ok bool) {
	if t.held.Load() == 0 {
		return nil, true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	tc := t.byRemote[remote]
	switch {
	case tc == nil || tc.state == kept:
		return nil, true
	case tc.state != undecided:
		return nil, false
	}
	tc.state = deciding
	t.dropWaiting(tc)
	return &Trial{t: t, tc: tc}, false
}

// Give decides the trial: the connection is kept, in its address's
// reserve, when presenter says its first request was the presenter's
// and the reserve has room; refused otherwise. It reports whether the
// connection was kept; only the first verdict counts.
func (tr *Trial) Give(presenter bool) bool {
	tr.once.Do(func() { tr.kept = tr.t.give(tr.tc, presenter) })
	return tr.kept
}

func (t *Trials) give(tc *trialConn, presenter bool) bool {
	keep := presenter && tc.counts.Take(tc.addr, true)
	t.mu.Lock()
	defer t.mu.Unlock()
	if tc.closed {
		if keep {
			tc.counts.Release(tc.addr)
		}
		return false
	}
	if keep {
		tc.state = kept
		// Decided for good: its next requests go on without a look.
		t.forget(tc)
		return true
	}
	tc.state = refused
	return false
}

// OnTrial is how many connections are on trial and undecided now.
func (t *Trials) OnTrial() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.waiting)
}

// forget takes tc out of byRemote; t.mu is held.
func (t *Trials) forget(tc *trialConn) {
	if t.byRemote[tc.remote] == tc {
		delete(t.byRemote, tc.remote)
		t.held.Store(int64(len(t.byRemote)))
	}
}

// dropWaiting takes tc out of the waiting line; t.mu is held.
func (t *Trials) dropWaiting(tc *trialConn) {
	for i, w := range t.waiting {
		if w == tc {
			t.waiting = append(t.waiting[:i], t.waiting[i+1:]...)
			return
		}
	}
}

// Close forgets the connection and gives back its place in the reserve
// when it was kept.
func (c *trialConn) Close() error {
	t := c.trials
	t.mu.Lock()
	if !c.closed {
		c.closed = true
		t.forget(c)
		if c.state == undecided {
			t.dropWaiting(c)
		}
		if c.state == kept {
			c.counts.Release(c.addr)
		}
	}
	t.mu.Unlock()
	return c.Conn.Close()
}

// SyscallConn is the socket under the connection, as countedConn's is.
func (c *trialConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errors.ErrUnsupported
}

// refusalSentence is what an address past its share of connections is
// told, at accept or on trial alike.
func refusalSentence(bound int) string {
	return fmt.Sprintf("Your address holds %d connections to this server already, its share: close some, then try again.\n", bound)
}

// Refuse answers a request whose connection Decide refused: 503 with
// Retry-After, the same answer as a refusal at accept, and the connection
// closes after it.
func Refuse(w http.ResponseWriter, bound int) {
	body := refusalSentence(bound)
	h := w.Header()
	h.Set("Retry-After", "5")
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Connection", "close")
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = fmt.Fprint(w, body)
}

// Package addrlimit bounds what one client address may hold open on a
// server at once: connections, at accept, and anything else counted in
// and out (requests in flight). A token bucket bounds how often an address
// asks, not how much it holds: a device that opens thousands of
// connections, or keeps hundreds of slow requests going, costs a
// goroutine, buffers and a file descriptor each, whatever its rate. The
// counts go back down as things close, and an address with nothing open
// is not remembered, so the tables are as large as what is open.
package addrlimit

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// DefaultConnections is how many connections one address may hold by
// default: a browser opens up to six to a server, so sixty students'
// laptops and phones behind one address (a school's NAT) stay well within
// it.
const DefaultConnections = 1024

// Counts counts what each address holds, up to a bound, with a reserve
// above it that only some callers may use (the presenter's).
type Counts struct {
	bound, reserve int
	mu             sync.Mutex
	open           map[string]int
}

// New counts up to bound per address, bound+reserve for the callers that
// may use the reserve.
func New(bound, reserve int) *Counts {
	return &Counts{bound: max(1, bound), reserve: max(0, reserve), open: make(map[string]int)}
}

// Bound is how many one address may hold without the reserve.
func (c *Counts) Bound() int { return c.bound }

// Take counts one more for addr unless it holds its bound already (its
// bound and the reserve when reserved): false means refuse it.
func (c *Counts) Take(addr string, reserved bool) bool {
	most := c.bound
	if reserved {
		most += c.reserve
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.open[addr] >= most {
		return false
	}
	c.open[addr]++
	return true
}

// Release gives back one that Take counted.
func (c *Counts) Release(addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := c.open[addr]; n > 1 {
		c.open[addr] = n - 1
	} else {
		delete(c.open, addr)
	}
}

// Held is how many addr holds now.
func (c *Counts) Held(addr string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.open[addr]
}

// Addresses is how many addresses hold something now.
func (c *Counts) Addresses() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.open)
}

// Listener holds each client address to a number of open connections:
// past it, a new connection is answered 503 with Retry-After and closed
// at once, before net/http spends a goroutine or a buffer on it.
type Listener struct {
	net.Listener
	counts *Counts
	// exempt names the addresses never counted; nil for none.
	exempt func(addr string) bool
	// refusing holds a place for each refusal being written: refusals
	// are written beside the accept loop, never in it, a few at once.
	refusing chan struct{}
	// trials, when set, takes the connections past their address's share
	// on trial instead of refusing them at accept (WithTrials).
	trials *Trials
}

// RefusalsAtOnce bounds the refusals a Listener writes at once. Each is
// written by a goroutine of its own, so that a client that does not read
// its refusal holds up no one's accept; past this many, a refused
// connection is closed without a word.
const RefusalsAtOnce = 16

// Bound wraps ln so that each address holds at most counts' bound of
// connections. At accept nothing says who a connection is from, so the
// reserve is only ever used by connections kept on trial (WithTrials).
func Bound(ln net.Listener, counts *Counts, exempt func(addr string) bool) *Listener {
	return &Listener{Listener: ln, counts: counts, exempt: exempt, refusing: make(chan struct{}, RefusalsAtOnce)}
}

// WithTrials has l take the connections past their address's share on
// trial (Trials) rather than refuse them at accept: the server then
// keeps those whose first request is the presenter's.
func (l *Listener) WithTrials(t *Trials) *Listener {
	l.trials = t
	return l
}

// Accept returns the next connection within its address's bound (or on
// trial past it, with WithTrials), refusing those past it.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		addr := Host(c.RemoteAddr())
		if l.exempt != nil && l.exempt(addr) {
			return c, nil
		}
		if !l.counts.Take(addr, false) {
			if l.trials != nil {
				return l.trials.admit(c, addr, l.counts), nil
			}
			select {
			case l.refusing <- struct{}{}:
				go func() {
					defer func() { <-l.refusing }()
					refuse(c, l.counts.bound)
				}()
			default:
				_ = c.Close()
			}
			continue
		}
		return &countedConn{Conn: c, addr: addr, counts: l.counts}, nil
	}
}

// Open is how many connections addr holds now.
func (l *Listener) Open(addr string) int { return l.counts.Held(addr) }

// refuse writes a connection past its address's bound all it gets, and
// closes it. The answer goes out before the request is read: a client
// that sent one reads it as the answer, one that sent none sees the
// connection close.
func refuse(c net.Conn, bound int) {
	body := refusalSentence(bound)
	// A fresh socket's send buffer takes these few hundred bytes at once;
	// the deadline is for one that somehow will not.
	_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	_, _ = fmt.Fprintf(c, "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 5\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
	_ = c.Close()
}

// countedConn gives its place back once, when it is closed (by net/http,
// or by whoever took it over).
type countedConn struct {
	net.Conn
	addr   string
	counts *Counts
	closed atomic.Bool
}

func (c *countedConn) Close() error {
	if c.closed.CompareAndSwap(false, true) {
		c.counts.Release(c.addr)
	}
	return c.Conn.Close()
}

// SyscallConn is the socket under the connection, when it has one: the
// live pages' writer writes to it without waiting (web/board/fan.go).
func (c *countedConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errors.ErrUnsupported
}

// Host is an address without its port.
func Host(a net.Addr) string {
	if tcp, ok := a.(*net.TCPAddr); ok {
		return tcp.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

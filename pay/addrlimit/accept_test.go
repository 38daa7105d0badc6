package addrlimit

import (
	"errors"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"
)

// stuckConn is a connection whose client never reads: a write waits
// until the test lets it go, whatever the deadline.
type stuckConn struct {
	net.Conn // nil: only what the listener uses is here
	from     net.Addr
	release  chan struct{}
	mu       sync.Mutex
	written  int
	closed   chan struct{}
	once     sync.Once
}

func newStuck(ip string, release chan struct{}) *stuckConn {
	return &stuckConn{from: &net.TCPAddr{IP: net.ParseIP(ip), Port: 40000}, release: release, closed: make(chan struct{})}
}

func (c *stuckConn) RemoteAddr() net.Addr             { return c.from }
func (c *stuckConn) SetWriteDeadline(time.Time) error { return nil }
func (c *stuckConn) Close() error                     { c.once.Do(func() { close(c.closed) }); return nil }
func (c *stuckConn) Write(b []byte) (int, error) {
	<-c.release
	c.mu.Lock()
	defer c.mu.Unlock()
	c.written += len(b)
	return len(b), nil
}

// queuedListener accepts the connections it is given, in order.
type queuedListener struct {
	net.Listener
	conns chan net.Conn
}

func (l *queuedListener) Accept() (net.Conn, error) {
	c, ok := <-l.conns
	if !ok {
		return nil, errors.New("closed")
	}
	return c, nil
}

// Refused connections whose clients never read do not hold up the accept
// loop: another address's connection is accepted while their refusals
// are still being written, RefusalsAtOnce of them at most; those past
// that are closed without a word.
func TestRefusalsAreWrittenBesideTheAcceptLoop(t *testing.T) {
	release := make(chan struct{})
	ln := &queuedListener{conns: make(chan net.Conn, RefusalsAtOnce+8)}
	bounded := Bound(ln, New(1, 0), nil)
	first := newStuck("192.0.2.1", release)
	ln.conns <- first
	if c, err := bounded.Accept(); err != nil || c.RemoteAddr() != first.from {
		t.Fatalf("the address's first connection: %v %v", c, err)
	}
	refused := make([]*stuckConn, RefusalsAtOnce+2)
	for i := range refused {
		refused[i] = newStuck("192.0.2.1", release)
		ln.conns <- refused[i]
	}
	other := newStuck("192.0.2.2", release)
	ln.conns <- other
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := bounded.Accept()
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	select {
	case c := <-accepted:
		if c.RemoteAddr() != other.from {
			t.Fatalf("accepted %v, want the other address's connection", c.RemoteAddr())
		}
	case <-time.After(time.Minute):
		close(release)
		t.Fatal("another address's connection was not accepted while refusals could not be written")
	}
	// Past RefusalsAtOnce, closed at once without an answer; the others
	// are still writing theirs.
	for _, c := range refused[RefusalsAtOnce:] {
		<-c.closed
		c.mu.Lock()
		n := c.written
		c.mu.Unlock()
		if n != 0 {
			t.Errorf("a refusal past the %d at once was written (%d bytes)", RefusalsAtOnce, n)
		}
	}
	for i, c := range refused[:RefusalsAtOnce] {
		select {
		case <-c.closed:
			t.Fatalf("refused connection %d closed before its refusal was written", i)
		default:
		}
	}
	close(release)
	for i, c := range refused[:RefusalsAtOnce] {
		<-c.closed
		c.mu.Lock()
		n := c.written
		c.mu.Unlock()
		if n == 0 {
			t.Errorf("refused connection %d was closed without its 503", i)
		}
	}
}

// TestAnAcceptedConnectionShowsItsSocket: the connections the listener
// hands out still show the socket under them (syscall.Conn), which the
// live pages' writer needs to write to them without waiting
// (web/board/fan.go): hidden by the wrapper that counts them, every page
// was written by a goroutine of its own.
func TestAnAcceptedConnectionShowsItsSocket(t *testing.T) {
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := Bound(tcp, New(4, 0), nil)
	defer ln.Close()
	client, err := net.Dial("tcp", tcp.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sc, ok := c.(syscall.Conn)
	if !ok {
		t.Fatalf("an accepted connection (%T) does not show its socket", c)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var fd uintptr
	if err := raw.Control(func(s uintptr) { fd = s }); err != nil || fd == 0 {
		t.Fatalf("the socket under an accepted connection: fd %d, %v", fd, err)
	}
}

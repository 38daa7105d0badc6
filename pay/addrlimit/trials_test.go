package addrlimit

import (
	"net"
	"sync/atomic"
	"testing"
)

// fakeConn is a connection from a port of its own that records Close.
type fakeConn struct {
	net.Conn // nil: only what Trials uses is here
	from     net.Addr
	closed   atomic.Bool
}

func (c *fakeConn) RemoteAddr() net.Addr { return c.from }
func (c *fakeConn) Close() error         { c.closed.Store(true); return nil }

func fakeFrom(port int) *fakeConn {
	return &fakeConn{from: &net.TCPAddr{IP: net.ParseIP("192.0.2.1"), Port: port}}
}

// A connection on trial is kept, in its address's reserve, when its
// first request is the presenter's, and refused otherwise; when the
// trials are full the oldest undecided one is closed for the next, and
// its request, if one was read, is refused too.
func TestTrialsKeepOnlyThePresentersConnections(t *testing.T) {
	counts := New(1, 1)
	if !counts.Take("192.0.2.1", false) {
		t.Fatal("the address's share")
	}
	trials := NewTrials(2)
	raw := []*fakeConn{fakeFrom(1), fakeFrom(2), fakeFrom(3), fakeFrom(4)}
	conns := make([]net.Conn, len(raw))
	for i, c := range raw[:3] {
		conns[i] = trials.admit(c, "192.0.2.1", counts)
	}
	if !raw[0].closed.Load() || raw[1].closed.Load() || raw[2].closed.Load() || trials.OnTrial() != 2 {
		t.Fatalf("the oldest undecided was not the one closed for the third: %v %v %v, %d on trial",
			raw[0].closed.Load(), raw[1].closed.Load(), raw[2].closed.Load(), trials.OnTrial())
	}
	asked := 0
	presenter := func(yes bool) func() bool { return func() bool { asked++; return yes } }
	if trials.Decide(raw[0].from.String(), presenter(true)) || asked != 0 {
		t.Fatal("a request read from a connection closed to make room went on")
	}
	if !trials.Decide(raw[1].from.String(), presenter(true)) {
		t.Fatal("the presenter's connection was not kept")
	}
	if !trials.Decide(raw[1].from.String(), presenter(false)) || asked != 1 {
		t.Fatal("a kept connection's next request was looked at again or refused")
	}
	if n := counts.Held("192.0.2.1"); n != 2 {
		t.Fatalf("%d counted for the address, want its share and the kept one", n)
	}
	if trials.Decide(raw[2].from.String(), presenter(false)) || trials.Decide(raw[2].from.String(), presenter(true)) {
		t.Fatal("a student's connection on trial went on")
	}
	conns[3] = trials.admit(raw[3], "192.0.2.1", counts)
	if trials.Decide(raw[3].from.String(), presenter(true)) {
		t.Fatal("the presenter past share and reserve was kept")
	}
	if !trials.Decide("192.0.2.9:1", presenter(false)) {
		t.Fatal("a connection never on trial was refused")
	}
	for _, c := range conns {
		_ = c.Close()
	}
	if n := counts.Held("192.0.2.1"); n != 1 {
		t.Fatalf("%d counted after the connections on trial closed, want the share's 1", n)
	}
	if trials.held.Load() != 0 || trials.OnTrial() != 0 {
		t.Fatal("closed connections are still remembered")
	}
}

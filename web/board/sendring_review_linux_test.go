//go:build linux

package board

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/a-h/templ"
)

// socketPeer is one page's connection in the writer's tests: out is the
// server's end, written by the fan writer, in the page's end.
type socketPeer struct {
	out  *net.TCPConn
	in   net.Conn
	raw  syscall.RawConn
	want bytes.Buffer // what the counts say reached the page
}

// socketPeers opens n connections on 127.0.0.1, closed at the test's end.
func socketPeers(t *testing.T, n int) []*socketPeer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peers := make([]*socketPeer, n)
	for i := range peers {
		in, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		out, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { in.Close(); out.Close() })
		raw, err := out.(*net.TCPConn).SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		peers[i] = &socketPeer{out: out.(*net.TCPConn), in: in, raw: raw}
	}
	return peers
}

// readAll ends what the writer sends to p and reads all of it.
func (p *socketPeer) readAll(t *testing.T) []byte {
	t.Helper()
	p.out.CloseWrite()
	got, err := io.ReadAll(p.in)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestARoundThroughTheRingGivesEachPageWhatOneWriteEachGives: the fan
// writer's writes through the ring (writeAll with a ring) and one write
// call per socket (the writer on a system without io_uring) give a
// round of hundreds of pages the same: each page that reads gets every
// round's bytes whole, once and in order; a page whose peer reads
// nothing, written more than its socket holds, takes part of a write
// and then none, and says so (the rest goes back to its stream, which
// would otherwise lose or double bytes); a page closed before the round
// and one whose write deadline has passed are sent nothing and say so.
// A send left pending by the ring (one that waited for room in the
// socket instead of taking what fits) would hang this test.
func TestARoundThroughTheRingGivesEachPageWhatOneWriteEachGives(t *testing.T) {
	needSendRing(t)
	const pages, rounds = 300, 4
	const stalled, closed, late = pages - 1, pages - 2, pages - 3
	type outcome struct {
		counts [rounds][pages]int
		got    [pages][]byte
		peers  []*socketPeer
	}
	run := func(ring bool) *outcome {
		o := &outcome{peers: socketPeers(t, pages)}
		o.peers[stalled].out.SetWriteBuffer(16 << 10)
		o.peers[closed].out.Close()
		o.peers[late].out.SetWriteDeadline(time.Now().Add(-time.Second))
		f := &fanWriter{noRing: !ring}
		defer func() {
			if f.ring != nil {
				f.ring.close()
			}
		}()
		for k := range rounds {
			ws := make([]pageWrite, pages)
			for i, p := range o.peers {
				// Sizes from a few bytes to a few KB, as a round's wakes
				// and phones' catch-ups are.
				b := fmt.Appendf(nil, "round %d page %d %s;", k, i, strings.Repeat("y", (i*37+k*101)%4000))
				if i == stalled {
					b = bytes.Repeat([]byte{byte('a' + k)}, 4<<20)
				}
				ws[i] = pageWrite{pg: &fanPage{raw: p.raw}, b: b}
			}
			f.writeAll(ws)
			if ring && f.ring == nil {
				t.Fatal("the writer made its round without the ring")
			}
			for i, w := range ws {
				o.counts[k][i] = w.n
				o.peers[i].want.Write(w.b[:w.n])
			}
		}
		for i, p := range o.peers {
			if i != closed {
				o.got[i] = p.readAll(t)
			}
		}
		return o
	}
	through, oneByOne := run(true), run(false)
	for name, o := range map[string]*outcome{"through the ring": through, "one write each": oneByOne} {
		for i, p := range o.peers {
			if i != closed && !bytes.Equal(o.got[i], p.want.Bytes()) {
				t.Errorf("%s: page %d read %d bytes, the counts said %d", name, i, len(o.got[i]), p.want.Len())
			}
		}
		for k := range rounds {
			if n := o.counts[k][closed]; n != 0 {
				t.Errorf("%s, round %d: the closed page took %d bytes", name, k, n)
			}
			if n := o.counts[k][late]; n != 0 {
				t.Errorf("%s, round %d: the page past its write deadline took %d bytes", name, k, n)
			}
			if n := o.counts[k][stalled]; n >= 4<<20 {
				t.Errorf("%s, round %d: the page that reads nothing took all of its %d bytes", name, k, n)
			}
		}
		if o.counts[0][stalled] == 0 {
			t.Errorf("%s: the page that reads nothing took nothing of its first write", name)
		}
	}
	// Every page that reads got the same bytes by either way.
	for i := range pages {
		if i == closed || i == late || i == stalled {
			continue
		}
		if !bytes.Equal(through.got[i], oneByOne.got[i]) {
			t.Fatalf("page %d: through the ring %.60q..., one write each %.60q...", i, through.got[i], oneByOne.got[i])
		}
	}
}

// TestARingThatFailsLaterGivesWayToOneWriteEach: when the ring stops
// working after the writer made it (here its descriptor is made a pipe
// under it, as a kernel or sandbox refusing io_uring_enter would look),
// the round it fails in still reaches every page once, one write each,
// and the writer drops the ring for good instead of sending through it
// again.
func TestARingThatFailsLaterGivesWayToOneWriteEach(t *testing.T) {
	needSendRing(t)
	const pages = 2*sendRingEntries + 5
	peers := socketPeers(t, pages)
	f := &fanWriter{}
	round := func(k int) {
		ws := make([]pageWrite, pages)
		for i, p := range peers {
			ws[i] = pageWrite{pg: &fanPage{raw: p.raw}, b: fmt.Appendf(nil, "round %d page %d;", k, i)}
		}
		f.writeAll(ws)
		for i, w := range ws {
			if w.n != len(w.b) {
				t.Fatalf("round %d, page %d: the socket took %d of %d bytes", k, i, w.n, len(w.b))
			}
			peers[i].want.Write(w.b)
		}
	}
	round(0)
	if f.ring == nil {
		t.Fatal("the writer made no ring")
	}
	var pipe [2]int
	if err := syscall.Pipe2(pipe[:], syscall.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(pipe[0])
	defer syscall.Close(pipe[1])
	// The ring's descriptor becomes the pipe's: the writer closes it
	// when it gives the ring up.
	if err := syscall.Dup3(pipe[0], f.ring.fd, syscall.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	round(1)
	if f.ring != nil || !f.noRing {
		t.Fatalf("the writer kept a ring that failed (ring %v, noRing %v)", f.ring != nil, f.noRing)
	}
	round(2)
	for i, p := range peers {
		if got := p.readAll(t); !bytes.Equal(got, p.want.Bytes()) {
			t.Fatalf("page %d read %q, want %q", i, got, p.want.Bytes())
		}
	}
}

// TestClosingTheRingTwiceClosesNoOtherFile: once the ring is closed its
// descriptor's number is free, and the next file opened may take it (a
// page's socket): closing the ring again must not close that file.
func TestClosingTheRingTwiceClosesNoOtherFile(t *testing.T) {
	r, err := newSendRing()
	if err != nil {
		t.Skipf("no io_uring here (%v)", err)
	}
	fd := r.fd
	r.close()
	var pipe [2]int
	if err := syscall.Pipe2(pipe[:], syscall.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(pipe[0])
	defer syscall.Close(pipe[1])
	// Another file takes the number the ring had: the pipe itself, as
	// the lowest free number, or else a copy of it.
	if fd != pipe[0] && fd != pipe[1] {
		if err := syscall.Dup3(pipe[0], fd, syscall.O_CLOEXEC); err != nil {
			t.Fatal(err)
		}
		defer syscall.Close(fd)
	}
	r.close()
	if _, _, e := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_GETFD, 0); e != 0 {
		t.Fatalf("closing the ring again closed the file that took its number: %v", e)
	}
}

// TestTheBoardsWriterGivesItsRingBackWhenItStops: the board's fan writer
// makes its ring for the rounds of several pages, keeps it from the
// programs the server starts (close-on-exec), and closes it when it
// stops, here as the board ends: a writer that stopped and started again
// for every page that came and went would otherwise leave a descriptor
// and its mappings behind each time.
func TestTheBoardsWriterGivesItsRingBackWhenItStops(t *testing.T) {
	needSendRing(t)
	b := newTestBoard(t, nil, 10)
	const readers = 3
	pages := make([]*stream, readers)
	for i := range pages {
		pages[i] = b.open(t)
	}
	attached := func() int {
		b.fan.mu.Lock()
		defer b.fan.mu.Unlock()
		return len(b.fan.pages)
	}
	waitUntil(t, "every page to be written by the fan writer", func() bool { return attached() == readers })
	b.mu.Lock()
	b.addFrameLocked(1000, false, []templ.Component{templ.Raw("<p>frame 1000</p>")})
	b.mu.Unlock()
	for i, s := range pages {
		for {
			_, data, _, err := s.next()
			if err != nil {
				t.Fatalf("page %d: %v", i, err)
			}
			if strings.Contains(data, "<p>frame 1000</p>") {
				break
			}
		}
	}
	b.fan.mu.Lock()
	fd := -1
	if b.fan.ring != nil {
		fd = b.fan.ring.fd
	}
	b.fan.mu.Unlock()
	if fd < 0 {
		t.Fatal("the writer wrote its round of several pages without a ring")
	}
	isRing := func() bool {
		l, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
		return err == nil && l == "anon_inode:[io_uring]"
	}
	if !isRing() {
		t.Fatalf("descriptor %d is not an io_uring", fd)
	}
	flags, _, e := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_GETFD, 0)
	if e != 0 || flags&syscall.FD_CLOEXEC == 0 {
		t.Errorf("the ring's descriptor is not close-on-exec (flags %#x, %v)", flags, e)
	}
	b.Close()
	waitUntil(t, "the writer to give its ring back", func() bool {
		b.fan.mu.Lock()
		defer b.fan.mu.Unlock()
		return b.fan.at == nil && b.fan.ring == nil && !isRing()
	})
}

// TestTheBoardEndsWhileItsWriterSendsThroughTheRing: the board ends (the
// server stops) while its writer makes rounds through the ring to pages
// that read. Ending closes every page's connection, which waits for a
// round that holds it open: the round ends without waiting for any page,
// the board's end reaches the writer, and the writer gives its ring back
// (the race detector checks the ring is used by the writer alone).
func TestTheBoardEndsWhileItsWriterSendsThroughTheRing(t *testing.T) {
	needSendRing(t)
	b := newTestBoard(t, nil, 100)
	const readers = 40
	ended := make(chan error, readers)
	for range readers {
		s := b.open(t)
		go func() {
			for {
				if _, _, _, err := s.next(); err != nil {
					ended <- err
					return
				}
			}
		}()
	}
	waitUntil(t, "every page to be written by the fan writer", func() bool {
		b.fan.mu.Lock()
		defer b.fan.mu.Unlock()
		return len(b.fan.pages) == readers
	})
	// Frames one wake at a time, until the board ends.
	publishing := make(chan struct{})
	go func() {
		defer close(publishing)
		for i := uint64(0); i < 100000; i++ {
			b.mu.Lock()
			if b.closed {
				b.mu.Unlock()
				return
			}
			b.addFrameLocked(1000+i, false, []templ.Component{templ.Raw(fmt.Sprintf("<p>frame %d %s</p>", i, strings.Repeat("z", 2000)))})
			b.mu.Unlock()
			for waited := 0; waited < 1000000; waited++ {
				b.mu.Lock()
				woken := b.closed || b.pulsed.Load() == b.frames
				b.mu.Unlock()
				if woken {
					break
				}
				time.Sleep(time.Millisecond)
			}
		}
	}()
	waitUntil(t, "the writer to send through its ring", func() bool {
		b.fan.mu.Lock()
		defer b.fan.mu.Unlock()
		return b.fan.ring != nil
	})
	b.Close()
	<-publishing
	waitUntil(t, "the writer to stop and give its ring back", func() bool {
		b.fan.mu.Lock()
		defer b.fan.mu.Unlock()
		return b.fan.at == nil && b.fan.ring == nil
	})
	for range readers {
		<-ended // each page's stream ended with the board
	}
}

// needSendRing skips a test of the ring where the system gives none; the
// ring it tried is given back.
func needSendRing(t *testing.T) {
	t.Helper()
	r, err := newSendRing()
	if err != nil {
		t.Skipf("no io_uring here (%v): the writer writes one socket at a time", err)
	}
	r.close()
}

//go:build linux

package board

import (
	"bytes"
	"fmt"
	"testing"
)

// TestTheSendRingWritesEachSocketWhatItTakes: a round's writes made
// through the ring (sendring_linux.go), more of them than one system
// call takes, reach each socket whole and in order; a socket that does
// not read, its buffer full, takes part of its write and says how much,
// as a single write would; a socket closed before the round is sent
// nothing. The fan writer hands the rest back to the page's stream from
// those counts, so a wrong count would lose or double bytes.
func TestTheSendRingWritesEachSocketWhatItTakes(t *testing.T) {
	r, err := newSendRing()
	if err != nil {
		t.Skipf("no io_uring here (%v): the writer writes one socket at a time", err)
	}
	defer r.close()

	const sockets = 2*sendRingEntries + 3
	peers := socketPeers(t, sockets)
	// The last page stops reading: its socket is filled first.
	full := peers[sockets-1]
	full.out.SetWriteBuffer(16 << 10)
	// One page's connection is closed before the round.
	closed := peers[sockets-2]
	closed.out.Close()

	round := func(k int) []pageWrite {
		ws := make([]pageWrite, sockets)
		for i, p := range peers {
			b := fmt.Appendf(nil, "round %d page %d;", k, i)
			if p == full {
				b = bytes.Repeat([]byte{'x'}, 8<<20)
			}
			ws[i] = pageWrite{pg: &fanPage{raw: p.raw}, b: b}
		}
		if !r.send(ws) {
			t.Fatal("the ring failed")
		}
		return ws
	}
	for k := range 3 {
		for i, w := range round(k) {
			p := peers[i]
			switch {
			case p == closed:
				if w.n != 0 {
					t.Fatalf("round %d: a closed socket took %d bytes", k, w.n)
				}
			case p == full:
				if w.n >= len(w.b) {
					t.Fatalf("round %d: a socket that reads nothing took all of %d bytes", k, len(w.b))
				}
				p.want.Write(w.b[:w.n])
			default:
				if w.n != len(w.b) {
					t.Fatalf("round %d, page %d: the socket took %d of %d bytes", k, i, w.n, len(w.b))
				}
				p.want.Write(w.b)
			}
		}
	}
	// Every page that reads has each round's bytes, in order and once;
	// the full one has what the counts said.
	for i, p := range peers {
		if p == closed {
			continue
		}
		got := p.readAll(t)
		if !bytes.Equal(got, p.want.Bytes()) {
			t.Fatalf("page %d read %d bytes %.60q, want %d bytes %.60q", i, len(got), got, p.want.Len(), p.want.Bytes())
		}
	}
	if full.want.Len() == 0 {
		t.Fatal("the full socket took nothing at all: its partial count was not tried")
	}
}

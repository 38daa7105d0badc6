package board

import (
	"bytes"
	"io"
	"math/rand"
	"net"
	"testing"
	"time"
)

// TestAStreamWriteLargerThanTheSocketHoldsArrivesWhole: a wake that
// gathered several pages' worth of changes (up to mergedWrite) is one
// write to a taken-over connection whose socket holds far less; the
// stream's write waits for the viewer to read, under its write deadline,
// and every byte arrives in order.
func TestAStreamWriteLargerThanTheSocketHoldsArrivesWhole(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	viewer, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer viewer.Close()
	conn, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Both sockets hold about 64 KiB (the kernel may double it); each
	// write below is several times that.
	if err := conn.(*net.TCPConn).SetWriteBuffer(64 << 10); err != nil {
		t.Fatal(err)
	}
	if err := viewer.(*net.TCPConn).SetReadBuffer(64 << 10); err != nil {
		t.Fatal(err)
	}

	// Writes of 1, 2 and 4 MiB, each unlike the others, filled by
	// copying a seeded random run of a length no buffer is a multiple
	// of, so bytes out of place or lost would show.
	seed := make([]byte, 4093)
	rand.New(rand.NewSource(49)).Read(seed)
	var writes [][]byte
	for i, size := range []int{1 << 20, 2 << 20, 4 << 20} {
		b := make([]byte, size)
		b[0] = byte(i)
		for off := 1; off < size; {
			off += copy(b[off:], seed)
		}
		writes = append(writes, b)
	}
	want := bytes.Join(writes, nil)

	s := &eventStream{conn: conn, timeout: time.Minute}
	wrote := make(chan error, 1)
	go func() {
		for _, b := range writes {
			if err := s.write(b); err != nil {
				wrote <- err
				return
			}
		}
		wrote <- conn.Close()
	}()
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(viewer)
		got <- b
	}()
	select {
	case err := <-wrote:
		if err != nil {
			t.Fatalf("the stream's write: %v", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the stream's writes were not all taken within 2 minutes")
	}
	select {
	case b := <-got:
		if !bytes.Equal(b, want) {
			t.Fatalf("the viewer read %d bytes, not the %d written, in order", len(b), len(want))
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the viewer did not read everything within 2 minutes")
	}
}

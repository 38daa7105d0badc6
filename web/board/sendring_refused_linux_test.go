//go:build linux

package board

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"unsafe"
)

// TestARefusedRingLeavesTheWriterWritingOneSocketAtATime: where the
// system refuses io_uring (a container's seccomp profile answers its
// setup with EPERM), the fan writer notes it once and writes each page
// with its own write call: every page of the round gets its bytes, and
// the writer does not ask again.
func TestARefusedRingLeavesTheWriterWritingOneSocketAtATime(t *testing.T) {
	const pages = 5
	peers := socketPeers(t, pages)
	round := func(k int) []pageWrite {
		ws := make([]pageWrite, pages)
		for i, p := range peers {
			ws[i] = pageWrite{pg: &fanPage{raw: p.raw}, b: fmt.Appendf(nil, "round %d page %d;", k, i)}
		}
		return ws
	}
	var f fanWriter
	rounds := [][]pageWrite{round(0), round(1)}
	done := make(chan error, 1)
	go func() {
		// The filter is this thread's alone, and the thread ends with the
		// goroutine (it is never unlocked): no other goroutine runs on it.
		runtime.LockOSThread()
		if err := refuseRingSetup(); err != nil {
			done <- fmt.Errorf("skip: %w", err)
			return
		}
		if _, err := newSendRing(); !errors.Is(err, syscall.EPERM) {
			done <- fmt.Errorf("skip: the filter did not refuse io_uring_setup (%v)", err)
			return
		}
		for _, ws := range rounds {
			f.writeAll(ws)
		}
		done <- nil
	}()
	if err := <-done; err != nil {
		if bytes.HasPrefix([]byte(err.Error()), []byte("skip: ")) {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	if f.ring != nil || !f.noRing {
		t.Fatalf("after a refused setup the writer has ring %v, noRing %v", f.ring != nil, f.noRing)
	}
	for _, ws := range rounds {
		for i, w := range ws {
			if w.n != len(w.b) {
				t.Fatalf("page %d: the socket took %d of %d bytes", i, w.n, len(w.b))
			}
			peers[i].want.Write(w.b)
		}
	}
	for i, p := range peers {
		if got := p.readAll(t); !bytes.Equal(got, p.want.Bytes()) {
			t.Fatalf("page %d read %q, want %q", i, got, p.want.Bytes())
		}
	}
}

// refuseRingSetup makes the calling thread's io_uring_setup fail with
// EPERM, as a seccomp profile that forbids io_uring does: a filter on
// this thread alone (and threads it starts, which the runtime does not
// start from a locked thread).
func refuseRingSetup() error {
	const (
		prSetNoNewPrivs   = 38
		prSetSeccomp      = 22
		seccompModeFilter = 2
		seccompRetErrno   = 0x00050000
		seccompRetAllow   = 0x7fff0000
	)
	filter := []syscall.SockFilter{
		{Code: syscall.BPF_LD | syscall.BPF_W | syscall.BPF_ABS, K: 0}, // seccomp_data.nr
		{Code: syscall.BPF_JMP | syscall.BPF_JEQ | syscall.BPF_K, Jt: 0, Jf: 1, K: sysIoUringSetup},
		{Code: syscall.BPF_RET | syscall.BPF_K, K: seccompRetErrno | uint32(syscall.EPERM)},
		{Code: syscall.BPF_RET | syscall.BPF_K, K: seccompRetAllow},
	}
	prog := syscall.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if _, _, e := syscall.RawSyscall6(syscall.SYS_PRCTL, prSetNoNewPrivs, 1, 0, 0, 0, 0); e != 0 {
		return fmt.Errorf("no_new_privs: %w", e)
	}
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetSeccomp, seccompModeFilter, uintptr(unsafe.Pointer(&prog))); e != 0 {
		return fmt.Errorf("seccomp filter: %w", e)
	}
	runtime.KeepAlive(filter)
	return nil
}

//go:build linux

package board

import (
	"errors"
	"runtime"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// sendRing makes a round's writes to many sockets in one system call, an
// io_uring of send requests, instead of one write call per socket. On
// this machine (no PCID, so the kernel's page-table isolation flushes the
// TLB on every entry and exit) a write call to a loopback socket cost
// its writer about 9 µs and the same send in a batch of a few hundred
// about 4.5 µs (a loopback writer and a reader in another process, 500
// sockets, 600 bytes each, rounds 20 ms apart, alternating). The sends
// are the same: each takes what the socket takes at once and never waits
// (MSG_DONTWAIT), so a page whose socket is full is handed back to its
// stream exactly as after a short write.
type sendRing struct {
	fd      int
	entries uint32
	sqHead  *uint32
	sqTail  *uint32
	sqMask  uint32
	sqArray []uint32
	sqes    []ringSQE
	cqHead  *uint32
	cqTail  *uint32
	cqMask  uint32
	cqes    []ringCQE
	maps    [][]byte
	// fds holds each batch's file descriptors while their sockets are
	// held open (sendBatch).
	fds []int32
}

// The kernel's structures and numbers (include/uapi/linux/io_uring.h).
type ringSQOffsets struct {
	head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
	userAddr                                                        uint64
}

type ringCQOffsets struct {
	head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
	userAddr                                                        uint64
}

type ringParams struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFd uint32
	resv                                                                   [3]uint32
	sq                                                                     ringSQOffsets
	cq                                                                     ringCQOffsets
}

type ringSQE struct {
	opcode, flags uint8
	ioprio        uint16
	fd            int32
	off           uint64
	addr          uint64
	len           uint32
	msgFlags      uint32
	userData      uint64
	pad           [3]uint64
}

type ringCQE struct {
	userData uint64
	res      int32
	flags    uint32
}

const (
	sysIoUringSetup = 425
	sysIoUringEnter = 426

	ringOpSend         = 26
	ringEnterGetEvents = 1
	ringSetupSubmitAll = 1 << 7
	ringOffSQRing      = 0
	ringOffCQRing      = 0x8000000
	ringOffSQEs        = 0x10000000
)

// sendRingEntries is the most sends one system call makes: a round of
// 500 pages takes four.
const sendRingEntries = 128

// newSendRing sets up a ring, or says why the system gives none (a
// kernel before 5.18, io_uring turned off, a sandbox that forbids it):
// the writer then writes one socket at a time.
func newSendRing() (*sendRing, error) {
	// A kernel that does not know IORING_SETUP_SUBMIT_ALL (before 5.18)
	// refuses the ring (EINVAL), and the writer writes one socket at a
	// time. The sends rely on MSG_DONTWAIT making a full socket's send
	// complete at once with what it took, as the io_uring of recent
	// kernels does; in some older ones a send could wait for room
	// instead, and hold up the round. The flag stands for "recent".
	var p ringParams
	p.flags = ringSetupSubmitAll
	fd, _, e := syscall.Syscall(sysIoUringSetup, sendRingEntries, uintptr(unsafe.Pointer(&p)), 0)
	if e != 0 {
		return nil, e
	}
	r := &sendRing{fd: int(fd), entries: p.sqEntries}
	if p.sqEntries < sendRingEntries || p.cqEntries < p.sqEntries {
		r.close()
		return nil, errors.New("io_uring: ring smaller than asked")
	}
	mapRing := func(off int64, size uint32) ([]byte, error) {
		b, err := syscall.Mmap(r.fd, off, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED|syscall.MAP_POPULATE)
		if err == nil {
			r.maps = append(r.maps, b)
		}
		return b, err
	}
	sq, err := mapRing(ringOffSQRing, p.sq.array+p.sqEntries*4)
	if err != nil {
		r.close()
		return nil, err
	}
	cq, err := mapRing(ringOffCQRing, p.cq.cqes+p.cqEntries*uint32(unsafe.Sizeof(ringCQE{})))
	if err != nil {
		r.close()
		return nil, err
	}
	sqes, err := mapRing(ringOffSQEs, p.sqEntries*uint32(unsafe.Sizeof(ringSQE{})))
	if err != nil {
		r.close()
		return nil, err
	}
	r.sqHead = (*uint32)(unsafe.Pointer(&sq[p.sq.head]))
	r.sqTail = (*uint32)(unsafe.Pointer(&sq[p.sq.tail]))
	r.sqMask = *(*uint32)(unsafe.Pointer(&sq[p.sq.ringMask]))
	r.sqArray = unsafe.Slice((*uint32)(unsafe.Pointer(&sq[p.sq.array])), p.sqEntries)
	r.sqes = unsafe.Slice((*ringSQE)(unsafe.Pointer(&sqes[0])), p.sqEntries)
	r.cqHead = (*uint32)(unsafe.Pointer(&cq[p.cq.head]))
	r.cqTail = (*uint32)(unsafe.Pointer(&cq[p.cq.tail]))
	r.cqMask = *(*uint32)(unsafe.Pointer(&cq[p.cq.ringMask]))
	r.cqes = unsafe.Slice((*ringCQE)(unsafe.Pointer(&cq[p.cq.cqes])), p.cqEntries)
	r.fds = make([]int32, sendRingEntries)
	return r, nil
}

// close gives the ring back to the kernel, once: its descriptor's number
// may belong to another file (a page's socket) as soon as it is closed.
func (r *sendRing) close() {
	for _, b := range r.maps {
		syscall.Munmap(b)
	}
	r.maps = nil
	if r.fd >= 0 {
		syscall.Close(r.fd)
		r.fd = -1
	}
}

// send writes each ws[i].b to its page's socket, what the socket takes at
// once, and sets ws[i].n to how much that was (0 when it took none, was
// closed or failed). It reports false when the ring failed: the sends
// without a count were not made, and the ring must not be used again.
func (r *sendRing) send(ws []pageWrite) bool {
	for len(ws) > 0 {
		n := min(len(ws), sendRingEntries)
		if !r.hold(ws[:n], 0) {
			return false
		}
		ws = ws[n:]
	}
	return true
}

// hold keeps the sockets of ws[i:] open while their sends are made: each
// is held by its RawConn.Write in turn, one inside the other, so that
// none is closed (and its number given to another file) before the ring
// is done with it, as a single write call is kept safe.
func (r *sendRing) hold(ws []pageWrite, i int) bool {
	if i == len(ws) {
		return r.sendHeld(ws)
	}
	ok, held := true, false
	// An error says the socket is closed; then f was not called.
	_ = ws[i].pg.raw.Write(func(fd uintptr) bool {
		held = true
		r.fds[i] = int32(fd)
		ok = r.hold(ws, i+1)
		return true
	})
	if !held {
		r.fds[i] = -1 // closed: nothing is sent to it
		ok = r.hold(ws, i+1)
	}
	return ok
}

// sendHeld makes ws's sends, whose sockets are held open (r.fds), and
// waits for every one to be counted: none waits for its socket.
func (r *sendRing) sendHeld(ws []pageWrite) bool {
	tail := atomic.LoadUint32(r.sqTail)
	queued := uint32(0)
	for i := range ws {
		ws[i].n = 0
		if r.fds[i] < 0 || len(ws[i].b) == 0 {
			continue
		}
		at := (tail + queued) & r.sqMask
		r.sqes[at] = ringSQE{
			opcode:   ringOpSend,
			fd:       r.fds[i],
			addr:     uint64(uintptr(unsafe.Pointer(&ws[i].b[0]))),
			len:      uint32(len(ws[i].b)),
			msgFlags: syscall.MSG_DONTWAIT | syscall.MSG_NOSIGNAL,
			userData: uint64(i),
		}
		r.sqArray[at] = at
		queued++
	}
	if queued == 0 {
		return true
	}
	atomic.StoreUint32(r.sqTail, tail+queued)
	toSubmit, counted, failures := queued, uint32(0), 0
	for counted < queued {
		got, _, e := syscall.Syscall6(sysIoUringEnter, uintptr(r.fd), uintptr(toSubmit), uintptr(queued-counted), ringEnterGetEvents, 0, 0)
		switch e {
		case 0:
			toSubmit -= min(toSubmit, uint32(got))
		case syscall.EINTR, syscall.EAGAIN, syscall.EBUSY:
		default:
			if counted == 0 && toSubmit == queued {
				// Refused before any send was taken: nothing was sent.
				runtime.KeepAlive(ws)
				return false
			}
			if failures++; failures > 1000 {
				panic("io_uring_enter keeps failing with sends under way: " + e.Error())
			}
		}
		head, ctail := atomic.LoadUint32(r.cqHead), atomic.LoadUint32(r.cqTail)
		for ; head != ctail; head++ {
			c := r.cqes[head&r.cqMask]
			if c.res > 0 && int(c.userData) < len(ws) {
				ws[c.userData].n = int(c.res)
			}
			counted++
		}
		atomic.StoreUint32(r.cqHead, head)
	}
	runtime.KeepAlive(ws)
	return true
}

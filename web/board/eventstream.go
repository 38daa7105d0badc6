package board

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"strconv"
	"syscall"
	"time"

	"paytwice/web/live"
)

var (
	heartbeatComment = []byte(": heartbeat\n\n")
	// retryHint starts every stream: EventSource's wait before it
	// reconnects.
	retryHint         = []byte("retry: " + strconv.Itoa(reconnectMS) + "\n\n")
	retryHintDeflated = live.Deflate(retryHint)
)

// eventStream is one viewer's connection. On HTTP/1.1 the handler takes
// the connection over from net/http, so that a wake is one write system
// call of bytes every viewer shares: net/http would split it into its
// buffer's worth, the rest and a chunk's end. The response then has no
// length and ends when the connection closes, as an event stream does.
// A connection that cannot be taken over (HTTP/2) is written through
// net/http instead.
type eventStream struct {
	conn net.Conn // taken over, or nil
	// raw is conn's socket, for the fan writer's writes that never
	// wait; nil when conn has none or the system offers no such write.
	raw     syscall.RawConn
	rc      *http.ResponseController
	w       http.ResponseWriter
	timeout time.Duration
	// deadlineSet is when the taken-over connection's write deadline was
	// last moved (see write).
	deadlineSet time.Time
	// gone is closed when the viewer hangs up (taken-over connections:
	// net/http no longer watches them).
	gone chan struct{}
	proj *Board
	// gzip says the body is gzip-encoded: what send writes is compressed
	// (live.Deflate), and the shared frames come compressed already.
	gzip bool
}

// startStream sends the response's headers and returns the stream, listed
// with the board so that shutdown can close it.
func startStream(w http.ResponseWriter, proj *Board) (*eventStream, error) {
	s := &eventStream{rc: http.NewResponseController(w), w: w, timeout: proj.cfg.WriteTimeout, gone: make(chan struct{}), proj: proj}
	conn, brw, err := s.rc.Hijack()
	if err != nil {
		// Streams last as long as the viewer stays: no server write
		// deadline applies to them.
		_ = s.rc.SetWriteDeadline(time.Time{})
		w.WriteHeader(http.StatusOK)
		if err := s.write(nil); err != nil {
			return nil, err
		}
		return s, nil
	}
	s.conn = conn
	_ = conn.SetDeadline(time.Time{})
	if sc, ok := conn.(syscall.Conn); ok && canFan {
		if raw, err := sc.SyscallConn(); err == nil {
			s.raw = raw
		}
	}
	proj.mu.Lock()
	closed := proj.closed
	if !closed {
		proj.streams[conn] = struct{}{}
	}
	proj.mu.Unlock()
	if closed {
		conn.Close()
		return nil, net.ErrClosed
	}
	go func() {
		// A viewer sends nothing more; a read returns when it hangs up.
		_, _ = io.Copy(io.Discard, brw.Reader)
		close(s.gone)
	}()
	var head bytes.Buffer
	head.WriteString("HTTP/1.1 200 OK\r\n")
	_ = w.Header().Write(&head)
	head.WriteString("Connection: close\r\n\r\n")
	if err := s.write(head.Bytes()); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// send writes b, part of the event stream made for this viewer alone,
// compressed when the stream is.
func (s *eventStream) send(b []byte) error {
	if s.gzip && len(b) > 0 {
		b = live.Deflate(b)
	}
	return s.write(b)
}

// write sends b to the viewer under the stream's write deadline, as it is.
func (s *eventStream) write(b []byte) error {
	return s.writeFrames(net.Buffers{b})
}

// writeFrames writes frames one after the other: on a taken-over
// connection in one vectored write, without copying them together.
func (s *eventStream) writeFrames(frames net.Buffers) error {
	if s.conn == nil {
		_ = s.rc.SetWriteDeadline(time.Now().Add(s.timeout))
		for _, b := range frames {
			if len(b) == 0 {
				continue
			}
			if _, err := s.w.Write(b); err != nil {
				return err
			}
		}
		return s.rc.Flush()
	}
	// Moving a deadline changes a timer in the runtime, and with hundreds
	// of viewers written ten times a second that was a timer change per
	// write. It is moved once a tenth of the timeout has gone by: a write
	// still has at least nine tenths of the timeout to be accepted.
	if now := time.Now(); now.Sub(s.deadlineSet) >= s.timeout/10 {
		_ = s.conn.SetWriteDeadline(now.Add(s.timeout))
		s.deadlineSet = now
	}
	_, err := frames.WriteTo(s.conn)
	return err
}

// handOver lifts the stream's write deadline as it hands its page to the
// board's fan writer. The writer's sends never wait, so they need none,
// and a deadline left from the stream's own writes would fail every one
// of them once it passed: the page was handed back to its stream and
// taken again every WriteTimeout, for nothing. The stream's next write of
// its own sets it again.
func (s *eventStream) handOver() {
	if s.conn == nil || s.deadlineSet.IsZero() {
		return
	}
	_ = s.conn.SetWriteDeadline(time.Time{})
	s.deadlineSet = time.Time{}
}

// close ends a taken-over connection and forgets it.
func (s *eventStream) close() {
	if s.conn == nil {
		return
	}
	s.proj.mu.Lock()
	delete(s.proj.streams, s.conn)
	s.proj.mu.Unlock()
	_ = s.conn.Close()
}

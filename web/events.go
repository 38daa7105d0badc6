package web

import (
	"bytes"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"paytwice/pay"
)

// The event stream's timing. The projector holds the first two so that a
// test can shorten them for its own server.
const (
	// heartbeatEvery keeps idle connections (and the proxies between)
	// from timing out, and lets a dead viewer be noticed.
	heartbeatEvery = 15 * time.Second
	// writeTimeout drops a viewer whose connection takes longer than this
	// to accept one batch: the hub never waits for it, and neither do we.
	writeTimeout = 10 * time.Second
	// reconnectMS is the retry hint sent to EventSource.
	reconnectMS = 1000
)

// DefaultMaxStreams is how many event streams a server keeps open at
// once unless configured otherwise: a classroom with a tab or two each.
const DefaultMaxStreams = 500

// streamRetryAfter is what a viewer turned away is asked to wait, in
// seconds.
const streamRetryAfter = 10

// handleEvents is GET /events: the live panels' Server-Sent Events
// stream. Each event is one `frame` of htmx out-of-band fragments with
// its sequence number as `id:`. A browser resumes after the last id it
// saw (Last-Event-ID, or ?since= on the page's first connection); one
// that asks for frames the projector no longer holds, or from a server
// that restarted, gets a single frame that redraws every panel instead.
// Viewers read the projector's frames, never the hub: an event that
// changes nothing on the page (most of them in busy mode) costs a viewer
// nothing, a viewer is woken at most once per fan-out interval however
// fast payments come, and a viewer too slow for the ring is dropped.
// Beyond Config.MaxStreams open streams a new one gets 503 and
// Retry-After.
func (s *Server) handleEvents(c echo.Context) error {
	r, w := c.Request(), c.Response()
	proj := s.live()
	last, resume := resumePoint(r)

	// Decide where the viewer starts under the projector's lock, so that
	// no frame is made between the decision and the count that keeps the
	// frames coming.
	var buf bytes.Buffer
	buf.WriteString("retry: " + strconv.Itoa(reconnectMS) + "\n\n")
	proj.mu.Lock()
	if proj.closed || proj.viewers.Load() >= int64(s.cfg.MaxStreams) {
		closed := proj.closed
		proj.mu.Unlock()
		c.Response().Header().Set("Retry-After", strconv.Itoa(streamRetryAfter))
		msg := fmt.Sprintf("This server already has %d live views open, its limit (-max-streams). The page works without its live panels; it reconnects by itself.", s.cfg.MaxStreams)
		if closed {
			msg = "The server is shutting down."
		}
		return writeProblem(c, pay.Errorf(pay.EUNAVAILABLE, "%s", msg))
	}
	proj.viewers.Add(1)
	cursor, ok := proj.resumeLocked(last)
	if !resume || !ok {
		// New, too far behind, or from before a restart: redraw.
		cursor = proj.frames
		writeFrame(&buf, proj.modelSeq, renderFrame(proj.fullFrameLocked()...))
	}
	proj.mu.Unlock()
	defer func() {
		proj.mu.Lock()
		proj.viewers.Add(-1)
		proj.mu.Unlock()
	}()

	rc := http.NewResponseController(w)
	// Streams last as long as the viewer stays: no server write deadline
	// applies to them.
	_ = rc.SetWriteDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if err := flushTo(rc, w, buf.Bytes(), proj.writeTimeout); err != nil {
		return nil
	}
	buf = bytes.Buffer{} // the redraw is sent: let it go

	ctx := r.Context()
	heartbeat := time.NewTimer(proj.heartbeat)
	defer heartbeat.Stop()
	for {
		frames, ok, wake := proj.framesAfter(cursor)
		if !ok {
			// Fell behind by more than the ring holds, or the server is
			// stopping: end the stream. A browser reconnects and is
			// redrawn.
			return nil
		}
		if len(frames) == 0 {
			select {
			case <-wake:
				continue
			case <-heartbeat.C:
				if flushTo(rc, w, heartbeatComment, proj.writeTimeout) != nil {
					return nil
				}
				heartbeat.Reset(proj.heartbeat)
				continue
			case <-ctx.Done():
				return nil
			}
		}
		// One write of bytes that every viewer at this point shares (or,
		// for a viewer that is behind, its frames one by one): a stream
		// copies no frame, so one that does not read pins at most
		// maxBatch frames, shared with the ring, until its write times out.
		if err := writeFrames(rc, w, proj, frames); err != nil {
			return nil
		}
		cursor = frames[len(frames)-1].n
		heartbeat.Reset(proj.heartbeat)
	}
}

var heartbeatComment = []byte(": heartbeat\n\n")

// writeFrames sends frames to one viewer and flushes, under a deadline.
func writeFrames(rc *http.ResponseController, w http.ResponseWriter, proj *projector, frames []frame) error {
	if b := proj.joined(frames); b != nil {
		return flushTo(rc, w, b, proj.writeTimeout)
	}
	_ = rc.SetWriteDeadline(time.Now().Add(proj.writeTimeout))
	for _, f := range frames {
		if _, err := w.Write(f.sse()); err != nil {
			return err
		}
	}
	return rc.Flush()
}

// resumePoint reads where a viewer left off: the Last-Event-ID header that
// EventSource sends when it reconnects, else the page's ?since=.
func resumePoint(r *http.Request) (uint64, bool) {
	v := r.Header.Get("Last-Event-ID")
	if v == "" {
		v = r.URL.Query().Get("since")
	}
	if v == "" {
		return 0, false
	}
	n, err := strconv.ParseUint(v, 10, 64)
	return n, err == nil
}

// writeFrame appends one SSE event: its id, its name and its HTML, one
// data line per line of HTML.
func writeFrame(buf *bytes.Buffer, id uint64, html []byte) {
	buf.WriteString("id: ")
	buf.WriteString(strconv.FormatUint(id, 10))
	buf.WriteString("\nevent: frame\n")
	for len(html) > 0 {
		line := html
		if i := bytes.IndexAny(html, "\r\n"); i >= 0 {
			line, html = html[:i], html[i+1:]
		} else {
			html = nil
		}
		buf.WriteString("data: ")
		buf.Write(line)
		buf.WriteByte('\n')
	}
	buf.WriteByte('\n')
}

// flushTo writes b to the viewer and flushes it, under a deadline.
func flushTo(rc *http.ResponseController, w http.ResponseWriter, b []byte, timeout time.Duration) error {
	_ = rc.SetWriteDeadline(time.Now().Add(timeout))
	_, err := w.Write(b)
	if err == nil {
		err = rc.Flush()
	}
	return err
}

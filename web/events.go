package web

import (
	"bytes"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
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
	// coalesce is the least time between two writes to one viewer. Under a
	// burst of events a viewer gets them in batches (one write, one flush)
	// instead of one write per event; a lone event goes out at once.
	coalesce = 5 * time.Millisecond
	// reconnectMS is the retry hint sent to EventSource.
	reconnectMS = 1000
)

// handleEvents is GET /events: the live panels' Server-Sent Events
// stream. Each event is one `frame` of htmx out-of-band fragments with
// its sequence number as `id:`. A browser resumes after the last id it
// saw (Last-Event-ID, or ?since= on the page's first connection); one
// that asks for frames the projector no longer holds, or from a server
// that restarted, gets a single frame that redraws every panel instead.
// Viewers read the projector's frames, never the hub: an event that
// changes nothing on the page (most of them in busy mode) costs a viewer
// nothing, and a viewer too slow for the ring is dropped.
func (s *Server) handleEvents(c echo.Context) error {
	r, w := c.Request(), c.Response()
	proj := s.live()
	proj.viewers.Add(1)
	defer proj.viewers.Add(-1)
	rc := http.NewResponseController(w)
	// Streams last as long as the viewer stays: no server write deadline
	// applies to them.
	_ = rc.SetWriteDeadline(time.Time{})

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)

	last, resume := resumePoint(r)
	var buf bytes.Buffer
	buf.WriteString("retry: " + strconv.Itoa(reconnectMS) + "\n\n")
	cursor := last
	if _, ok, _ := proj.framesAfter(last); !resume || !ok || last > s.hub.LastSeq() {
		// New, too far behind, or from before a restart: redraw.
		cursor = s.redraw(&buf, proj)
	}
	if err := flushTo(rc, w, &buf, proj.writeTimeout); err != nil {
		return nil
	}

	ctx := r.Context()
	heartbeat := time.NewTimer(proj.heartbeat)
	defer heartbeat.Stop()
	var lastWrite time.Time
	for {
		frames, ok, wake := proj.framesAfter(cursor)
		if !ok {
			// Fell behind by more than the ring holds: drop the viewer. The
			// browser reconnects and is redrawn.
			return nil
		}
		if len(frames) == 0 {
			select {
			case <-wake:
				continue
			case <-heartbeat.C:
				buf.WriteString(": heartbeat\n\n")
				if flushTo(rc, w, &buf, proj.writeTimeout) != nil {
					return nil
				}
				heartbeat.Reset(proj.heartbeat)
				continue
			case <-ctx.Done():
				return nil
			}
		}
		// Let a burst of frames collect into one write.
		if wait := coalesce - time.Since(lastWrite); wait > 0 {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return nil
			}
			if frames, ok, _ = proj.framesAfter(cursor); !ok {
				return nil
			}
		}
		for _, f := range frames {
			buf.Write(f.sse)
		}
		cursor = frames[len(frames)-1].seq
		if flushTo(rc, w, &buf, proj.writeTimeout) != nil {
			return nil
		}
		lastWrite = time.Now()
		heartbeat.Reset(proj.heartbeat)
	}
}

// redraw writes a frame that redraws every panel from the projector's
// current state, and returns the seq the viewer continues after.
func (s *Server) redraw(buf *bytes.Buffer, proj *projector) uint64 {
	proj.mu.Lock()
	seq := proj.modelSeq
	html := renderFrame(proj.fullFrameLocked()...)
	proj.mu.Unlock()
	writeFrame(buf, seq, html)
	return seq
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

// flushTo writes buf to the viewer and flushes it, under a deadline.
func flushTo(rc *http.ResponseController, w http.ResponseWriter, buf *bytes.Buffer, timeout time.Duration) error {
	if buf.Len() == 0 {
		return nil
	}
	_ = rc.SetWriteDeadline(time.Now().Add(timeout))
	_, err := w.Write(buf.Bytes())
	buf.Reset()
	if err == nil {
		err = rc.Flush()
	}
	return err
}

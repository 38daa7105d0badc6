package web

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"paytwice/web/live"
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
	// instead of one write per event; a lone event goes out at once. In
	// busy mode, when frames are only refreshes, viewers wake less often.
	coalesce     = 15 * time.Millisecond
	coalesceBusy = 100 * time.Millisecond
	// reconnectMS is the retry hint sent to EventSource.
	reconnectMS = 1000
)

// noFrame is the render function viewers pass to Entry.Frame: they never
// render. The projector renders every frame before it lets viewers read
// it, so this only answers for events it skipped after falling behind.
func noFrame(live.Event) []byte { return nil }

// handleEvents is GET /events: the live panels' Server-Sent Events
// stream. Each event is one `frame` of htmx out-of-band fragments with
// its sequence number as `id:`. A browser resumes after the last id it
// saw (Last-Event-ID, or ?since= on the page's first connection); one
// that asks for events the hub no longer holds, or from a server that
// restarted, gets a single frame that redraws every panel instead.
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
	var sub *live.Subscription
	var buf bytes.Buffer
	buf.WriteString("retry: " + strconv.Itoa(reconnectMS) + "\n\n")
	if !resume || last > s.hub.LastSeq() {
		sub = s.redraw(&buf, proj)
	} else {
		sub = s.hub.Subscribe(last)
	}
	if err := flushTo(rc, w, &buf, proj.writeTimeout); err != nil {
		return nil
	}

	ctx := r.Context()
	// nowCtx is already done: Next with it takes what is there and never
	// waits.
	nowCtx, cancelNow := context.WithCancel(ctx)
	cancelNow()
	first := true
	var lastWrite time.Time
	for {
		nctx, cancel := context.WithTimeout(ctx, proj.heartbeat)
		entries, err := sub.Next(nctx)
		cancel()
		switch {
		case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
			buf.WriteString(": heartbeat\n\n")
			if flushTo(rc, w, &buf, proj.writeTimeout) != nil {
				return nil
			}
			continue
		case errors.Is(err, live.ErrTooSlow) && first:
			// The page asked to resume from an event the ring no longer
			// holds: redraw instead.
			sub = s.redraw(&buf, proj)
			if flushTo(rc, w, &buf, proj.writeTimeout) != nil {
				return nil
			}
			continue
		case err != nil:
			// Too slow mid-stream (dropped: the browser reconnects and is
			// redrawn), the hub closed, or the viewer left.
			return nil
		}
		first = false
		// Let a burst of events collect into one write.
		gap := coalesce
		if proj.busyFlag.Load() {
			gap = coalesceBusy
		}
		if wait := gap - time.Since(lastWrite); wait > 0 {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return nil
			}
			more, err := sub.Next(nowCtx)
			switch {
			case err == nil:
				entries = append(entries, more...)
			case !errors.Is(err, context.Canceled):
				return nil // too slow, or the hub closed
			}
		}
		newest := entries[len(entries)-1].Seq
		if !proj.waitFramed(ctx, newest, waitForFrame) {
			return nil
		}
		for _, e := range entries {
			buf.Write(e.Frame(noFrame)) // a finished SSE event, or nothing
		}
		if flushTo(rc, w, &buf, proj.writeTimeout) != nil {
			return nil
		}
		lastWrite = time.Now()
	}
}

// redraw writes a frame that redraws every panel from the projector's
// current state, and returns a subscription that continues right after it.
func (s *Server) redraw(buf *bytes.Buffer, proj *projector) *live.Subscription {
	proj.mu.Lock()
	seq := proj.modelSeq
	frame := renderFrame(proj.fullFrameLocked()...)
	proj.mu.Unlock()
	writeFrame(buf, seq, frame)
	if seq == 0 {
		// Nothing applied yet: whatever the hub holds is still to come.
		return s.hub.Subscribe(0)
	}
	return s.hub.Subscribe(seq)
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

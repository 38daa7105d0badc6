package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"paytwice/pay/proxy"
	"paytwice/static"
	"paytwice/views"
)

// proxyLive serves the proxy's own pages at its address: the live page
// (/_proxy/), its stream of updates (/_proxy/events), the report as it
// stands (/_proxy/report.json) and the style sheets and scripts
// (/static/). Everything else goes to the proxy.
type proxyLive struct {
	proxy *proxy.Proxy

	mu      sync.Mutex
	viewers map[chan struct{}]bool
	closed  bool
	done    chan struct{}
}

// maxProxyViewers caps the live page's open streams.
const maxProxyViewers = 32

// proxyPageActions is how many of a client's latest actions the page
// shows; the report has them all.
const proxyPageActions = 50

func newProxyLive() *proxyLive {
	return &proxyLive{viewers: map[chan struct{}]bool{}, done: make(chan struct{})}
}

// changed wakes every viewer; a viewer already woken stays woken once, so
// a busy client costs the page one render per tick, not one per request.
func (l *proxyLive) changed() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for ch := range l.viewers {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// close ends every stream.
func (l *proxyLive) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.closed = true
		close(l.done)
	}
}

func (l *proxyLive) routes(p http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /_proxy/{$}", l.handlePage)
	mux.HandleFunc("GET /_proxy/events", l.handleEvents)
	mux.HandleFunc("GET /_proxy/report.json", l.handleReport)
	mux.HandleFunc("GET /static/{name}", handleProxyStatic)
	mux.Handle("/", p)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A browser that opens the proxy's address gets the live page;
		// a client's own requests to / go on to the API.
		if r.Method == http.MethodGet && r.URL.Path == "/" && strings.Contains(r.Header.Get("Accept"), "text/html") {
			http.Redirect(w, r, "/_proxy/", http.StatusSeeOther)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

func (l *proxyLive) view() views.ProxyView {
	return proxyView(l.proxy.Snapshot(), proxyPageActions)
}

func pageHeaders(h http.Header) {
	h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
}

func (l *proxyLive) handlePage(w http.ResponseWriter, r *http.Request) {
	var buf bytes.Buffer
	if err := views.ProxyPage(l.view()).Render(r.Context(), &buf); err != nil {
		http.Error(w, "the page could not be drawn: "+err.Error(), http.StatusInternalServerError)
		return
	}
	pageHeaders(w.Header())
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write(buf.Bytes())
}

func (l *proxyLive) handleReport(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, l.proxy.Snapshot())
}

// handleEvents streams the live part of the page, drawn again after each
// change, at most every proxyFrame.
func (l *proxyLive) handleEvents(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming is not supported on this connection", http.StatusBadRequest)
		return
	}
	wake := make(chan struct{}, 1)
	l.mu.Lock()
	if l.closed || len(l.viewers) >= maxProxyViewers {
		l.mu.Unlock()
		w.Header().Set("Retry-After", "5")
		http.Error(w, fmt.Sprintf("at most %d live pages are served at once; try again shortly", maxProxyViewers), http.StatusServiceUnavailable)
		return
	}
	l.viewers[wake] = true
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		delete(l.viewers, wake)
		l.mu.Unlock()
	}()
	pageHeaders(w.Header())
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	flusher.Flush()
	frame := time.NewTicker(proxyFrame)
	defer frame.Stop()
	dirty := true // the page may be older than the first frame
	for {
		select {
		case <-r.Context().Done():
			return
		case <-l.done:
			return
		case <-wake:
			dirty = true
		case <-frame.C:
			if !dirty {
				continue
			}
			dirty = false
			if err := writeProxyFrame(r.Context(), w, l.view()); err != nil {
				return
			}
			flusher.Flush()
		}
	}
}

// proxyFrame is the shortest time between two drawings of the page.
const proxyFrame = 250 * time.Millisecond

// writeProxyFrame sends the live part as one SSE event, each line of the
// HTML as a data line.
func writeProxyFrame(ctx context.Context, w http.ResponseWriter, v views.ProxyView) error {
	var buf bytes.Buffer
	if err := views.ProxyLive(v).Render(ctx, &buf); err != nil {
		return err
	}
	var out bytes.Buffer
	out.WriteString("event: grades\n")
	for line := range strings.SplitSeq(buf.String(), "\n") {
		out.WriteString("data: ")
		out.WriteString(strings.TrimRight(line, "\r"))
		out.WriteByte('\n')
	}
	out.WriteByte('\n')
	_, err := w.Write(out.Bytes())
	return err
}

// handleProxyStatic serves the embedded style sheets and scripts the page
// links to.
func handleProxyStatic(w http.ResponseWriter, r *http.Request) {
	f, immutable, ok := static.Lookup(r.PathValue("name"))
	if !ok {
		http.Error(w, "no such static file", http.StatusNotFound)
		return
	}
	if immutable {
		w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
	}
	http.ServeContent(w, r, f.Name, time.Time{}, bytes.NewReader(f.Content))
}

// proxyView turns a report into what the page shows: each client's
// grades and its latest actions, newest first.
func proxyView(rep proxy.Report, latest int) views.ProxyView {
	v := views.ProxyView{Target: rep.Target, Faults: joinFaults(rep.Faults), StreamURL: "/_proxy/events"}
	for _, c := range rep.Clients {
		pc := views.ProxyClient{Name: c.Client}
		for _, g := range c.Grades {
			pc.Rules = append(pc.Rules, views.ProxyRule{Num: int(g.Rule), Name: g.Name, Asks: g.Rule.Info().Asks,
				Verdict: string(g.Verdict), Exercised: g.Exercised, Broken: g.Broken, Detail: g.Detail})
		}
		for _, a := range c.Actions {
			pc.Attempts += len(a.Attempts)
		}
		for i := len(c.Actions) - 1; i >= 0; i-- {
			if len(pc.Actions) == latest {
				pc.Older = i + 1
				break
			}
			pc.Actions = append(pc.Actions, actionView(c.Actions[i]))
		}
		v.Clients = append(v.Clients, pc)
	}
	return v
}

func actionView(a proxy.Action) views.ProxyAction {
	av := views.ProxyAction{ID: a.ID, Order: a.Order, Fault: string(a.Fault), FaultSays: a.Fault.Describe(), Books: a.Books}
	for _, at := range a.Attempts {
		pa := views.ProxyAttempt{Number: at.Number, Key: at.Key, Fault: string(at.Fault)}
		if at.Number > 1 && !at.Overlapped {
			pa.Wait = fmt.Sprintf("%.0f ms", at.WaitMS)
		}
		switch {
		case !at.Done:
			pa.Answer = "in flight"
		case at.Status == 0:
			pa.Answer, pa.Bad = "no answer", true
		default:
			pa.Answer = fmt.Sprintf("%d %s", at.Status, http.StatusText(at.Status))
			if at.Replayed {
				pa.Answer += " (replayed)"
			}
			pa.Bad = at.Status >= 400
		}
		av.Attempts = append(av.Attempts, pa)
	}
	for _, vi := range a.Violations {
		av.Broken = append(av.Broken, fmt.Sprintf("rule %d: %s", vi.Rule, vi.Detail))
	}
	return av
}

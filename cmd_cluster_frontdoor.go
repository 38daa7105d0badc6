package main

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"paytwice/pay/addrlimit"
	"paytwice/pay/check"
	"paytwice/pay/peers"
)

// frontDoor hands each request to the next server in turn, as a load
// balancer would, passing over servers that are gone. Writes (POST, PUT,
// PATCH, DELETE) take their turns apart from reads: a page's own reads
// (its event stream, the lab's and the vote's refreshes) may fire
// between the two clicks of a double-click, and on one shared turn they
// could send both clicks to the same server, which is the thing the
// cluster is there to show.
type frontDoor struct {
	servers   []*child
	nextWrite atomic.Uint64
	nextRead  atomic.Uint64
	proxy     *httputil.ReverseProxy
	// The door is where a student's address is seen, and it sees every
	// request of the cluster: it bounds each address's connections
	// (listener) and requests in flight (ServeHTTP) with the servers'
	// -limits, the presenter's reserve included. Each server's own count
	// of requests in flight sees only its part of them.
	shares   addrlimit.Shares
	conns    *addrlimit.Counts
	inFlight *addrlimit.Counts
	// streams counts each address's live views (GET /events) across the
	// servers: each server counts only the ones it serves, so without
	// this an address would hold -limits streams-per-address on every
	// one of them.
	streams *addrlimit.Counts
	// trials keeps a connection past its address's share when its first
	// request is the presenter's: by the cookie, which the door checks
	// itself, or by a header token a server recognises
	// (peers.PresenterSeenHeader), which only the servers compare.
	trials *addrlimit.Trials
	// tokens are the header tokens a server recognised as the
	// presenter's lately, by their SHA-256: only they get the reserve of
	// requests in flight. The presenter's address is often a whole
	// class's (one NAT), so the address alone says nothing of who sent a
	// request; and the door learns only tokens a server already
	// confirmed, so it answers no guess a server would not count.
	tokens confirmedTokens
	// cookie is the presenter cookie's value, "" without a token.
	cookie string
	// mark is the door's mark on what it sends the servers
	// (peers.FrontDoorHeader): the probes of a token too.
	mark string
}

// confirmedTokens remembers the SHA-256 of the few header tokens a
// server recognised as the presenter's, each for as long as a place of
// the presenter's is kept: never the token itself.
type confirmedTokens struct{ seen *addrlimit.Places }

func tokenDigest(token string) string {
	sum := sha256.Sum256([]byte(token))
	return string(sum[:])
}

// note remembers token, which a server recognised just now.
func (c confirmedTokens) note(token string) { c.seen.Note(tokenDigest(token)) }

// has reports whether a server recognised token lately ("" never).
func (c confirmedTokens) has(token string) bool {
	return token != "" && c.seen.Has(tokenDigest(token))
}

// hop is one try of a request on one server.
type hop struct {
	server *child
	sender
	err error // why the proxy could not get an answer
}

// sender is who the door saw send a request.
type sender struct {
	client string // the address the request came from
	// token is the request's header token, "" when there is none or the
	// request carries the presenter's cookie: a server's word that it
	// saw the presenter then is about the cookie, not this token.
	token string
}

type hopKey struct{}

// Bounds of what the front door reads of a server's answer. The servers
// are this command's own, but a bound costs nothing and keeps a server
// gone wrong from taking the door's memory with it: past one, the client
// gets a 502 that names it. Time is bounded by the servers themselves
// (the gateway time-out, step mode's limit per checkpoint) and by the
// wait for an answer's headers, which step mode may stretch to minutes.
const (
	frontDoorMaxHeader = 1 << 20
	frontDoorMaxBody   = 64 << 20 // a class's timeline export is a few MiB
	frontDoorWait      = 15 * time.Minute
)

// cappedBody fails a read past left bytes.
type cappedBody struct {
	io.ReadCloser
	left int64
}

func (c *cappedBody) Read(p []byte) (int, error) {
	if c.left <= 0 {
		var one [1]byte
		if n, err := c.ReadCloser.Read(one[:]); n == 0 && err == io.EOF {
			return 0, io.EOF // exactly the bound
		}
		return 0, errFrontDoorBody
	}
	p = p[:min(int64(len(p)), c.left)]
	n, err := c.ReadCloser.Read(p)
	c.left -= int64(n)
	return n, err
}

// errFrontDoorBody says a server's answer was larger than the door
// forwards.
var errFrontDoorBody = fmt.Errorf("its answer's body is larger than the front door forwards (%d MiB)", frontDoorMaxBody>>20)

func newFrontDoor(servers []*child, mark string, stderr io.Writer) *frontDoor {
	d := &frontDoor{servers: servers, mark: mark}
	d.bound(addrlimit.Shares{Connections: addrlimit.DefaultConnections, InFlight: addrlimit.DefaultInFlight, Reserve: addrlimit.DefaultReserve,
		Streams: addrlimit.DefaultStreams, IdleAfter: addrlimit.DefaultIdleAfter}, "", time.Now)
	d.proxy = &httputil.ReverseProxy{
		Transport: &http.Transport{
			Proxy:                  nil,
			DialContext:            (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConnsPerHost:    256,
			IdleConnTimeout:        90 * time.Second,
			MaxResponseHeaderBytes: frontDoorMaxHeader,
			ResponseHeaderTimeout:  frontDoorWait,
		},
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(pr.In.Context().Value(hopKey{}).(*hop).server.url)
			// The Host the browser used: the cross-origin guard compares it
			// with Origin, and the board shows it as the join address.
			pr.Out.Host = pr.In.Host
			// Only the address this front door saw: a client's own
			// X-Forwarded-For is not to be believed.
			pr.SetXForwarded()
			// Set, never passed on: a client's own copy is overwritten.
			pr.Out.Header.Set(peers.FrontDoorHeader, mark)
		},
		// Event streams reach the browser as each event is written.
		FlushInterval: -1,
		ModifyResponse: func(res *http.Response) error {
			// A server closes the connection after each checkout payment so
			// that the browser sends the next attempt on a fresh one
			// (web/page_attempts.go, freshConnectionPerPayment): Connection is a
			// hop-by-hop header the proxy drops, so say it again for the
			// browser's connection to this door.
			if res.Close {
				res.Header.Set("Connection", "close")
			}
			h := res.Request.Context().Value(hopKey{}).(*hop)
			if epoch := res.Header.Get(peers.StreamEpochHeader); epoch != "" {
				h.server.epoch.Store(&epoch)
			}
			seen := res.Header.Get(peers.PresenterSeenHeader) != ""
			if seen {
				res.Header.Del(peers.PresenterSeenHeader) // for the door alone
				if h.token != "" {
					d.tokens.note(h.token)
				}
			}
			if res.ContentLength > frontDoorMaxBody {
				return errFrontDoorBody
			}
			if !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
				// An answer of unknown length is cut at the bound: the
				// client sees its connection end, never a shortened answer
				// that looks whole.
				res.Body = &cappedBody{ReadCloser: res.Body, left: frontDoorMaxBody}
			}
			return nil
		},
		ErrorHandler: func(_ http.ResponseWriter, r *http.Request, err error) {
			if strings.Contains(err.Error(), "response headers exceeded") {
				err = fmt.Errorf("its answer's headers are larger than the front door reads (%d KiB)", frontDoorMaxHeader>>10)
			}
			r.Context().Value(hopKey{}).(*hop).err = err // ServeHTTP answers
		},
		ErrorLog: log.New(stderr, "paytwice cluster: front door: ", 0),
	}
	return d
}

// ServeHTTP sends r to the next server. A server that refuses the
// connection never saw the request, so the next one gets it; one that
// took it and failed may have acted on it, so the client is told, and
// retries with its key, rather than the door sending it again itself.
func (d *frontDoor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	from := sender{client: connectionAddress(r), token: r.Header.Get(check.PresenterHeader)}
	client := from.client
	cookie := d.presenterCookie(r)
	if trial, ok := d.trials.Begin(r.RemoteAddr); trial != nil || !ok {
		// A connection past its address's share, on trial: kept for the
		// presenter's cookie or a token a server recognised already; a
		// token no server has seen yet is asked of one, which counts it
		// when wrong, before the request goes anywhere; any other request
		// is refused, and its connection closed. So a made-up token earns
		// the connection no answer a student without one would not get.
		switch {
		case trial != nil && (cookie || d.tokens.has(from.token)):
			ok = trial.Give(true)
		case trial != nil && from.token != "":
			ok = trial.Give(d.probeToken(r, from))
		case trial != nil:
			trial.Give(false)
		}
		if !ok {
			addrlimit.Refuse(w, d.shares.Connections)
			return
		}
	}
	if cookie {
		// Never counted, as on the servers: the presenter is never behind
		// the students of its address.
		from.token = ""
	} else if r.URL.Path == "/events" {
		// Live views have their own share, counted here across the
		// servers. The presenter's are not counted, as on the servers: by
		// the cookie above, or by a header token a server recognised.
		if !d.tokens.has(from.token) {
			if !d.streams.Take(client, false) {
				w.Header().Set("Connection", "close")
				writeFrontDoorProblemAfter(w, http.StatusTooManyRequests, addrlimit.StreamRetryAfter, fmt.Sprintf(
					"Your address (%s) holds %d live views already on the servers of this class, its share (-limits %s): this one was not sent to any of them. Close a tab; the page works without its live panels and reconnects by itself.",
					client, d.shares.Streams, addrlimit.StreamsName))
				return
			}
			defer d.streams.Release(client)
		}
	} else {
		// A token in the header is not compared here (the servers compare
		// it, under the limit on wrong ones): it may use the reserve once
		// a server has recognised that very token. Any other gets the
		// address's share, wherever it comes from: behind one NAT, the
		// presenter's address is every student's.
		reserved := d.tokens.has(from.token)
		if !d.inFlight.Take(client, reserved) {
			w.Header().Set("Connection", "close")
			writeFrontDoorProblem(w, http.StatusTooManyRequests, fmt.Sprintf(
				"Your address (%s) has %d requests in flight already on the servers of this class, its share (-limits %s): this one was not sent to any of them, so nothing was done. The next is answered in 1 second. Everyone else's are answered as usual.",
				client, d.shares.InFlight, addrlimit.InFlightName))
			return
		}
		defer d.inFlight.Release(client)
	}
	r = r.WithContext(context.WithValue(r.Context(), senderKey{}, from))
	if r.Body != nil && r.Body != http.NoBody {
		// The proxy closes the body it forwarded; kept open, it can still
		// go to the next server after a refused connection read none of it.
		r.Body = io.NopCloser(r.Body)
	}
	n := uint64(len(d.servers))
	turn := &d.nextRead
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
	default:
		turn = &d.nextWrite
	}
	order := make([]*child, 0, n)
	if isWorkshopPath(r.URL.Path) {
		// The workshop is run by one server (web/workshop): its
		// registrations, runs and students' gateways all go to the first
		// server still running, in the same order every time, so a
		// student's gateway charges land where their run is judged. Every
		// server's board reads its scoreboard from the shared database.
		order = append(order, d.servers...)
		d.serve(w, r, order)
		return
	}
	// A page resuming its event stream goes back first to the server that
	// numbered its events, while it runs: that server alone can send it
	// exactly the frames it missed, where any other draws the whole room
	// again.
	home := d.streamHome(r)
	if home != nil {
		order = append(order, home)
	}
	first := turn.Add(1)
	for i := range n {
		if c := d.servers[(first+i)%n]; c != home {
			order = append(order, c)
		}
	}
	d.serve(w, r, order)
}

type senderKey struct{}

// frontDoorProbeWait bounds the wait for a server's word on a token.
const frontDoorProbeWait = 30 * time.Second

// probeToken asks the next running server whether from's header token
// is the presenter's (GET peers.PresenterProbePath, with the door's mark
// and the client's address, as a forwarded request carries them): the
// server compares it under the limit on wrong tokens, shared by the
// servers, and counts a wrong one against the client's address. A token
// it recognises is remembered, as one recognised on a forwarded request
// is. Nothing of r but the token and the address reaches the server.
func (d *frontDoor) probeToken(r *http.Request, from sender) bool {
	ctx, cancel := context.WithTimeout(r.Context(), frontDoorProbeWait)
	defer cancel()
	n := uint64(len(d.servers))
	first := d.nextRead.Add(1)
	for i := range n {
		server := d.servers[(first+i)%n]
		if server.hasExited() {
			continue
		}
		u := *server.url
		u.Path, u.RawQuery = peers.PresenterProbePath, ""
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
		if err != nil {
			return false
		}
		req.Host = r.Host
		req.Header.Set(check.PresenterHeader, from.token)
		req.Header.Set(peers.FrontDoorHeader, d.mark)
		req.Header.Set("X-Forwarded-For", from.client)
		res, err := d.proxy.Transport.RoundTrip(req)
		if errors.Is(err, syscall.ECONNREFUSED) {
			continue
		}
		if err != nil {
			return false
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
		res.Body.Close()
		seen := res.Header.Get(peers.PresenterSeenHeader) != ""
		if seen {
			d.tokens.note(from.token)
		}
		return seen
	}
	return false
}

// bound sets the door's shares per address and the presenter's cookie,
// with the clock now: the tokens a server confirmed are kept for the
// shares' IdleAfter.
func (d *frontDoor) bound(sh addrlimit.Shares, cookie string, now func() time.Time) {
	d.shares, d.cookie = sh, cookie
	d.conns = addrlimit.New(sh.Connections, sh.Reserve)
	d.inFlight = addrlimit.New(sh.InFlight, sh.Reserve)
	d.streams = addrlimit.New(sh.Streams, 0)
	d.trials = addrlimit.NewTrials(addrlimit.TrialsAtOnce)
	d.tokens = confirmedTokens{addrlimit.NewPlaces(now, sh.IdleAfter)}
}

// listener bounds ln's connections per address: -limits'
// connections-per-address; past it a connection is on trial, kept in the
// presenter's reserve when its first request is the presenter's.
func (d *frontDoor) listener(ln net.Listener) net.Listener {
	return addrlimit.Bound(ln, d.conns, nil).WithTrials(d.trials)
}

// presenterCookie reports whether r carries the presenter's cookie.
func (d *frontDoor) presenterCookie(r *http.Request) bool {
	if d.cookie == "" {
		return false
	}
	c, err := r.Cookie(peers.PresenterCookie)
	return err == nil && subtle.ConstantTimeCompare([]byte(c.Value), []byte(d.cookie)) == 1
}

// connectionAddress is the address r's connection comes from.
func connectionAddress(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// isWorkshopPath reports whether path belongs to the workshop: its
// pages, its API and the students' gateways.
func isWorkshopPath(path string) bool {
	for _, root := range []string{"/workshop", "/api/workshop"} {
		if path == root || strings.HasPrefix(path, root+"/") {
			return true
		}
	}
	return false
}

// serve sends r to the first server of order that runs and takes the
// connection.
func (d *frontDoor) serve(w http.ResponseWriter, r *http.Request, order []*child) {
	n := len(d.servers)
	for _, server := range order {
		h := &hop{server: server, sender: r.Context().Value(senderKey{}).(sender)}
		if h.server.hasExited() {
			continue
		}
		d.proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), hopKey{}, h)))
		switch {
		case h.err == nil:
			return
		case errors.Is(h.err, syscall.ECONNREFUSED):
			continue
		case r.Context().Err() != nil:
			return // the client left: nobody to answer
		}
		writeFrontDoorProblem(w, http.StatusBadGateway, fmt.Sprintf(
			"Server %s took the request but gave no answer (%v). It may have acted on it: retry with the same Idempotency-Key, never a new one.",
			h.server.name, h.err))
		return
	}
	writeFrontDoorProblem(w, http.StatusServiceUnavailable, fmt.Sprintf(
		"None of the %d servers behind this front door is running or accepting connections; their output says why.", n))
}

// streamHome is the server that numbered the events a page resumes its
// event stream from (GET /events with Last-Event-ID, or ?since= on its
// first connection), nil for any other request, for an id without an
// epoch, or when no server runs under that epoch any more.
func (d *frontDoor) streamHome(r *http.Request) *child {
	if r.Method != http.MethodGet || r.URL.Path != "/events" {
		return nil
	}
	id := r.Header.Get("Last-Event-ID")
	if id == "" {
		id = r.URL.Query().Get("since")
	}
	i := strings.LastIndexByte(id, '-')
	if i <= 0 {
		return nil
	}
	epoch := id[:i]
	for _, c := range d.servers {
		if e := c.epoch.Load(); e != nil && *e == epoch && !c.hasExited() {
			return c
		}
	}
	return nil
}

// writeFrontDoorProblem answers for the door itself, as problem+json. Its
// type is about:blank: the explanation pages live on the servers, which
// are what failed.
func writeFrontDoorProblem(w http.ResponseWriter, status int, detail string) {
	// Every answer but a refused live view invites a retry with the same
	// key: a 502 when a server took the request and gave no answer (the
	// key on that server holds whatever it did), a 503 when no server
	// could take it, a 429 when none was sent it.
	writeFrontDoorProblemAfter(w, status, 1, detail)
}

// writeFrontDoorProblemAfter is writeFrontDoorProblem with Retry-After
// seconds.
func writeFrontDoorProblemAfter(w http.ResponseWriter, status, seconds int, detail string) {
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Cache-Control", "no-store")
	h.Set("Retry-After", strconv.Itoa(seconds))
	h.Set("Stripe-Should-Retry", "true")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}{"about:blank", http.StatusText(status), status, detail})
}

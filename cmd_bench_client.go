package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// A load generator shares the machine with the server it measures, so
// every microsecond of its own CPU is one the server does not get.
// net/http's client spent about 60 µs per request, three times wrk's,
// mostly on what a benchmark does not need: a request, a header map and a context per
// call, two goroutines per connection handing each request across
// channels, and a timer and a goroutine per request for Client.Timeout.
// benchConn does what wrk does instead: each client goroutine owns one
// keep-alive connection, writes each request from a buffer it reuses and
// reads the answer in place, with the time-out as the connection's
// deadline. Of the answer it reads only what a benchmark needs: the
// status, whether it was replayed, and how the body ends (a length,
// chunks, or the connection closing): http.ReadResponse, which builds a
// header map per answer, took a third of what was left.

// requestTemplate is what every request of a run shares, split around the
// per-request parts: the key in its header and the body.
type requestTemplate struct {
	addr      string      // host:port to dial
	tlsConfig *tls.Config // nil for http://
	head      []byte      // request line and the fixed headers
	body      []bodyPart  // -body, split around {key} and {n}
	// callers, when not empty, are the Authorization lines of -callers
	// distinct callers: a key's requests are always its one caller's
	// (callerOf), as a replay must be to find its key.
	callers [][]byte
}

// withCallers makes the template's requests come from n distinct
// callers, "Bearer <prefix>caller-<i>" each.
func (t *requestTemplate) withCallers(n int, prefix string) {
	t.callers = make([][]byte, n)
	for i := range t.callers {
		t.callers[i] = []byte("Authorization: Bearer " + prefix + "caller-" + strconv.Itoa(i) + "\r\n")
	}
}

// callerOf is the Authorization line of key's caller: the key's FNV-1a
// hash picks it, so that every request with one key, in any mode, comes
// from one caller, and the keys spread evenly over the callers.
func (t *requestTemplate) callerOf(key string) []byte {
	return t.callers[callerIndex(key, len(t.callers))]
}

// callerIndex is which of n callers pays key (callerOf).
func callerIndex(key string, n int) int {
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h = (h ^ uint32(key[i])) * 16777619
	}
	return int(h % uint32(n))
}

// bodyPart is literal text, or one of the placeholders.
type bodyPart struct {
	text        string
	isKey, isNo bool
}

// newRequestTemplate prepares the requests to rawURL; header holds more
// header lines, "Name: value" each.
func newRequestTemplate(rawURL, body, auth string, header ...string) (*requestTemplate, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	t := &requestTemplate{addr: u.Host}
	if u.Port() == "" {
		port := "80"
		if u.Scheme == "https" {
			port = "443"
		}
		t.addr = net.JoinHostPort(u.Hostname(), port)
	}
	if u.Scheme == "https" {
		t.tlsConfig = &tls.Config{ServerName: u.Hostname(), NextProtos: []string{"http/1.1"}}
	}
	var h strings.Builder
	fmt.Fprintf(&h, "POST %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: paytwice-bench\r\nContent-Type: application/json\r\n", u.RequestURI(), u.Host)
	if auth != "" {
		fmt.Fprintf(&h, "Authorization: %s\r\n", auth)
	}
	for _, line := range header {
		fmt.Fprintf(&h, "%s\r\n", line)
	}
	t.head = []byte(h.String())
	t.body = splitBody(body)
	return t, nil
}

// splitBody cuts body at each {key} and {n}, left to right, as one pass of
// a strings.Replacer would replace them.
func splitBody(body string) []bodyPart {
	var parts []bodyPart
	for body != "" {
		k, n := strings.Index(body, "{key}"), strings.Index(body, "{n}")
		switch {
		case k < 0 && n < 0:
			return append(parts, bodyPart{text: body})
		case n < 0 || (k >= 0 && k < n):
			parts = append(parts, bodyPart{text: body[:k]}, bodyPart{isKey: true})
			body = body[k+len("{key}"):]
		default:
			parts = append(parts, bodyPart{text: body[:n]}, bodyPart{isNo: true})
			body = body[n+len("{n}"):]
		}
	}
	return parts
}

// benchConn is one client's connection and the buffers it reuses.
type benchConn struct {
	t        *requestTemplate
	unquoted bool
	timeout  time.Duration

	conn     net.Conn // nil until dialled, and after the server closed it
	br       *bufio.Reader
	answered bool         // the connection has answered a request already
	unwatch  func() bool  // stops the context's watch on conn
	req, bod []byte       // the request being built
	kept     bytes.Buffer // the answer's body, when kept
}

// dial opens the connection; a cancelled ctx later breaks off whatever
// the connection is doing.
func (c *benchConn) dial(ctx context.Context) error {
	d := net.Dialer{Timeout: c.timeout}
	conn, err := d.DialContext(ctx, "tcp", c.t.addr)
	if err != nil {
		return err
	}
	if c.t.tlsConfig != nil {
		tc := tls.Client(conn, c.t.tlsConfig)
		hctx, cancel := context.WithTimeout(ctx, c.timeout)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			conn.Close()
			return err
		}
		conn = tc
	}
	c.conn, c.answered = conn, false
	if c.br == nil {
		c.br = bufio.NewReaderSize(conn, 16<<10)
	} else {
		c.br.Reset(conn)
	}
	c.unwatch = context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	return nil
}

func (c *benchConn) close() {
	if c.conn == nil {
		return
	}
	c.unwatch()
	c.conn.Close()
	c.conn = nil
}

// send posts one payment with key, request number n; keepBody keeps the
// answer's body. It returns when the answer has been read in full.
func (c *benchConn) send(ctx context.Context, key string, n int, keepBody bool) answer {
	c.bod = c.bod[:0]
	for _, p := range c.t.body {
		switch {
		case p.isKey:
			c.bod = append(c.bod, key...)
		case p.isNo:
			c.bod = strconv.AppendInt(c.bod, int64(n), 10)
		default:
			c.bod = append(c.bod, p.text...)
		}
	}
	c.req = append(c.req[:0], c.t.head...)
	if len(c.t.callers) > 0 {
		c.req = append(c.req, c.t.callerOf(key)...)
	}
	c.req = append(c.req, "Idempotency-Key: "...)
	if c.unquoted {
		c.req = append(c.req, key...)
	} else {
		c.req = strconv.AppendQuote(c.req, key)
	}
	c.req = append(c.req, "\r\nContent-Length: "...)
	c.req = strconv.AppendInt(c.req, int64(len(c.bod)), 10)
	c.req = append(c.req, "\r\n\r\n"...)
	c.req = append(c.req, c.bod...)

	t0 := time.Now()
	a := c.roundTrip(ctx, t0, keepBody)
	if errors.Is(a.err, errNoAnswer) {
		// The server had closed a connection that sat idle: as net/http
		// does for a request with an Idempotency-Key, send it once more
		// on a new one.
		a = c.roundTrip(ctx, t0, keepBody)
	}
	a.done = time.Now()
	a.latency = a.done.Sub(t0)
	if a.err != nil {
		c.close()
	}
	return a
}

// errNoAnswer marks a reused connection that failed before any byte of
// an answer arrived.
var errNoAnswer = errors.New("connection closed before an answer")

// roundTrip writes c.req and reads its answer.
func (c *benchConn) roundTrip(ctx context.Context, t0 time.Time, keepBody bool) answer {
	if c.conn == nil {
		if err := c.dial(ctx); err != nil {
			return answer{err: err}
		}
	}
	reused := c.answered
	if err := c.conn.SetDeadline(t0.Add(c.timeout)); err != nil {
		return c.fail(ctx, err, false)
	}
	// A time-out is not a connection the server closed while it sat
	// idle: the request's time is over, and it is not sent again.
	if _, err := c.conn.Write(c.req); err != nil {
		return c.fail(ctx, err, reused && !errors.Is(err, os.ErrDeadlineExceeded))
	}
	if _, err := c.br.Peek(1); err != nil {
		return c.fail(ctx, err, reused && !errors.Is(err, os.ErrDeadlineExceeded))
	}
	a, err := c.readAnswer(keepBody)
	if err != nil {
		return c.fail(ctx, err, false)
	}
	c.answered = true
	return a
}

// readAnswer reads one answer from c.br, skipping interim 1xx ones, and
// closes the connection when the answer says it will not be reused.
func (c *benchConn) readAnswer(keepBody bool) (answer, error) {
	for {
		h, err := c.readHead()
		if err != nil {
			return answer{}, err
		}
		if h.status >= 100 && h.status < 200 && h.status != http.StatusSwitchingProtocols {
			continue
		}
		a := answer{status: h.status, replayed: h.replayed}
		var body io.Writer = io.Discard
		if keepBody {
			c.kept.Reset()
			body = &c.kept
		}
		switch {
		case h.status == http.StatusNoContent || h.status == http.StatusNotModified:
		case h.chunked:
			if _, err := io.Copy(body, httputil.NewChunkedReader(c.br)); err != nil {
				return a, err
			}
			for { // the trailer, up to its empty line
				line, err := c.br.ReadSlice('\n')
				if err != nil {
					return a, err
				}
				if len(bytes.TrimRight(line, "\r\n")) == 0 {
					break
				}
			}
		case h.length >= 0:
			if keepBody {
				_, err = io.CopyN(body, c.br, h.length)
			} else {
				_, err = c.br.Discard(int(h.length))
			}
			if err != nil {
				return a, err
			}
		default: // the body ends where the connection does
			if _, err := io.Copy(body, c.br); err != nil {
				return a, err
			}
			h.close = true
		}
		if keepBody {
			a.body = c.kept.String()
		}
		if h.close {
			c.close()
		}
		return a, nil
	}
}

// answerHead is what a benchmark reads of an answer's status line and
// header.
type answerHead struct {
	status         int
	length         int64 // -1 when not given
	chunked, close bool
	replayed       bool
}

var (
	headerContentLength    = []byte("Content-Length")
	headerTransferEncoding = []byte("Transfer-Encoding")
	headerConnection       = []byte("Connection")
	headerReplayed         = []byte("Idempotent-Replayed")
)

// readHead reads a status line and the header after it.
func (c *benchConn) readHead() (answerHead, error) {
	h := answerHead{length: -1}
	line, err := c.br.ReadSlice('\n')
	if err != nil {
		return h, headErr(err)
	}
	// "HTTP/1.1 201 Created"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' {
		return h, fmt.Errorf("malformed status line %q", bytes.TrimSpace(line))
	}
	h.close = line[7] == '0' // HTTP/1.0 closes unless told otherwise
	h.status, err = strconv.Atoi(string(line[9:12]))
	if err != nil || h.status < 100 {
		return h, fmt.Errorf("malformed status line %q", bytes.TrimSpace(line))
	}
	for {
		line, err := c.br.ReadSlice('\n')
		if err != nil {
			return h, headErr(err)
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			return h, nil
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, headerContentLength):
			h.length, err = strconv.ParseInt(string(value), 10, 64)
			if err != nil || h.length < 0 {
				return h, fmt.Errorf("malformed Content-Length %q", value)
			}
		case bytes.EqualFold(name, headerTransferEncoding):
			h.chunked = bytes.Contains(bytes.ToLower(value), []byte("chunked"))
		case bytes.EqualFold(name, headerConnection):
			switch v := bytes.ToLower(value); {
			case bytes.Contains(v, []byte("close")):
				h.close = true
			case bytes.Contains(v, []byte("keep-alive")):
				h.close = false
			}
		case bytes.EqualFold(name, headerReplayed):
			h.replayed = bytes.EqualFold(value, []byte("true"))
		}
	}
}

func headErr(err error) error {
	if err == bufio.ErrBufferFull {
		return errors.New("a header line longer than 16 KB")
	}
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// fail closes the connection after err; beforeAnswer says that a reused
// connection broke before the server answered, so the request may be
// sent again.
func (c *benchConn) fail(ctx context.Context, err error, beforeAnswer bool) answer {
	c.close()
	if ctx.Err() != nil {
		return answer{err: ctx.Err()}
	}
	if beforeAnswer {
		err = fmt.Errorf("%w: %w", errNoAnswer, err)
	}
	return answer{err: err}
}

package check

// This file holds a request's answer: how it is read, within the run's
// bounds, from the client or from a connection written by hand.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// answer is one request's outcome.
type answer struct {
	Record
	Header http.Header
	// unreached says the connection could not even be opened; bound,
	// which bound the answer went past (it is then not compared).
	unreached bool
	bound     string
}

// ok says the request was answered with a 2xx.
func (a answer) ok() bool { return !a.NoAnswer && a.Status >= 200 && a.Status < 300 }

// same says a and b are the same answer: status and bytes, compared
// whole by their hash. Answers past a bound are never the same.
func (a answer) same(b answer) bool {
	return !a.NoAnswer && !b.NoAnswer && a.bound == "" && b.bound == "" && a.Status == b.Status && a.BodySHA256 == b.BodySHA256
}

// sameBody says a and b carry the same bytes, whatever their status.
func (a answer) sameBody(b answer) bool {
	return !a.NoAnswer && !b.NoAnswer && a.bound == "" && b.bound == "" && a.BodySHA256 == b.BodySHA256
}

func (a answer) String() string {
	if a.NoAnswer {
		return "no answer (" + a.Error + ")"
	}
	return fmt.Sprintf("%d %s", a.Status, http.StatusText(a.Status))
}

// retryAfter is the answer's Retry-After, if it has one in seconds.
func (a answer) retryAfter() (time.Duration, bool) {
	v := a.Header.Get("Retry-After")
	if v == "" {
		return 0, false
	}
	if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n >= 0 {
		return time.Duration(n) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(0, time.Until(t)), true
	}
	return 0, false
}

// send sends q and records it.
func (r *run) send(ctx context.Context, q req) answer {
	hr, body, err := r.newRequest(ctx, q)
	rec := r.recordOf(q, orDefault(q.method, http.MethodPost), orDefault(q.url, r.cfg.URL), body)
	rec.Start = time.Now()
	if err != nil {
		rec.End, rec.NoAnswer, rec.Error = time.Now(), true, err.Error()
		return answer{Record: rec}
	}
	res, err := r.client.Do(hr)
	a := r.finish(rec, res, err)
	if !q.noRecord {
		r.record(a.Record)
	}
	return a
}

func shortErr(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return err.Error()
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// rawConn is a request written by hand on a connection of its own, so
// that the checker chooses when its last byte leaves and whether its
// answer is read at all.
type rawConn struct {
	conn net.Conn
	in   *bufio.Reader
	// capped bounds what is read from conn: the header bytes, then the
	// body's.
	capped  *capReader
	bodyMax int64
	rest    []byte // the bytes not yet sent
	rec     Record
	// deadline ends the whole exchange: timeout after the last byte.
	deadline time.Time
	timeout  time.Duration
}

// dialRaw opens a connection for q and sends all of it but the last byte.
func (r *run) dialRaw(ctx context.Context, q req) (*rawConn, error) {
	hr, body, err := r.newRequest(ctx, q)
	if err != nil {
		return nil, err
	}
	hr.Close = true
	var buf bytes.Buffer
	if err := hr.Write(&buf); err != nil {
		return nil, err
	}
	host := hr.URL.Host
	if hr.URL.Port() == "" {
		if hr.URL.Scheme == "https" {
			host += ":443"
		} else {
			host += ":80"
		}
	}
	conn, err := r.dial(ctx, "tcp", host)
	if err != nil {
		return nil, err
	}
	if hr.URL.Scheme == "https" {
		tc := tls.Client(conn, &tls.Config{ServerName: hr.URL.Hostname(), NextProtos: []string{"http/1.1"},
			InsecureSkipVerify: r.tls.InsecureSkipVerify, RootCAs: r.tls.RootCAs})
		if err := tc.HandshakeContext(ctx); err != nil {
			conn.Close()
			return nil, err
		}
		conn = tc
	}
	data := buf.Bytes()
	deadline := time.Now().Add(r.cfg.Timeout)
	_ = conn.SetDeadline(deadline)
	if _, err := conn.Write(data[:len(data)-1]); err != nil {
		conn.Close()
		return nil, err
	}
	rec := r.recordOf(q, hr.Method, hr.URL.String(), body)
	capped := &capReader{r: conn, left: r.cfg.MaxHeaderBytes, what: fmt.Sprintf("its headers went past %d bytes (-max-header-bytes)", r.cfg.MaxHeaderBytes)}
	return &rawConn{conn: conn, in: bufio.NewReader(capped), capped: capped, bodyMax: r.cfg.MaxBodyBytes,
		rest: data[len(data)-1:], rec: rec, deadline: deadline, timeout: r.cfg.Timeout}, nil
}

// release sends the last byte: the server now has the whole request.
//
// The time for the answer (-timeout) runs from now: opening the other
// connections of a storm does not eat into it.
func (c *rawConn) release() error {
	c.rec.Start = time.Now()
	c.deadline = c.rec.Start.Add(c.timeout)
	_ = c.conn.SetDeadline(c.deadline)
	_, err := c.conn.Write(c.rest)
	return err
}

// maxInterim bounds the interim (1xx) answers read before the final one.
const maxInterim = 10

// read reads the answer, past any interim 1xx, and closes the connection.
func (c *rawConn) read(r *run, req *http.Request) answer {
	defer c.conn.Close()
	res, err := http.ReadResponse(c.in, req)
	for i := 0; err == nil && isInterim(res.StatusCode) && i < maxInterim; i++ {
		res, err = http.ReadResponse(c.in, req)
	}
	if err == nil {
		// The headers are in: what is left to read is the body (and what
		// the bufio.Reader already holds of it).
		c.capped.left = c.bodyMax + 1
	}
	return r.finish(c.rec, res, err)
}

// capReader reads at most left bytes, then fails with what.
type capReader struct {
	r    io.Reader
	left int64
	what string
}

// boundError says an answer went past a bound of the checker's.
type boundError struct{ what string }

func (e *boundError) Error() string { return e.what }

func (c *capReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		return 0, &boundError{c.what}
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}

func isInterim(status int) bool {
	return status >= 100 && status < 200 && status != http.StatusSwitchingProtocols
}

// awaitContinue waits, for at most limit, for the server's "100
// Continue" to a request sent with Expect: 100-continue. It reads no
// further than the first status line; a final answer instead is left
// for read.
func (c *rawConn) awaitContinue(limit time.Duration) bool {
	_ = c.conn.SetReadDeadline(time.Now().Add(limit))
	defer c.conn.SetReadDeadline(c.deadline)
	line, err := c.in.Peek(len("HTTP/1.1 100 "))
	if err != nil || !bytes.HasPrefix(line, []byte("HTTP/1.")) || !bytes.HasSuffix(line, []byte(" 100 ")) {
		return false
	}
	res, err := http.ReadResponse(c.in, &http.Request{Method: http.MethodPost})
	return err == nil && res.StatusCode == http.StatusContinue
}

// finish reads res (or takes err) into rec's answer, ending it now. The
// body is read up to -max-body-bytes and hashed whole; the record keeps
// its first keepBytes. An answer past a bound says which.
func (r *run) finish(rec Record, res *http.Response, err error) answer {
	a := answer{Record: rec}
	if err == nil {
		h := sha256.New()
		var kept bytes.Buffer
		n, rerr := io.Copy(io.MultiWriter(h, &limitedBuffer{b: &kept, max: keepBytes}), io.LimitReader(res.Body, r.cfg.MaxBodyBytes+1))
		res.Body.Close()
		a.Status, a.Response, a.Header = res.StatusCode, kept.String(), res.Header
		a.BodySHA256, a.BodyBytes = hex.EncodeToString(h.Sum(nil)), n
		a.ContentType = res.Header.Get("Content-Type")
		a.Replayed = replayMarker(res.Header)
		switch {
		case n > r.cfg.MaxBodyBytes:
			a.bound = fmt.Sprintf("the answer's body went past %d bytes (-max-body-bytes)", r.cfg.MaxBodyBytes)
			a.Limit = "body"
		case rerr != nil:
			err = rerr
		}
	}
	a.End = time.Now()
	if err != nil {
		var be *boundError
		var oe *net.OpError
		switch {
		case errors.As(err, &be):
			a.bound, a.Limit = be.what, "headers"
		case strings.Contains(err.Error(), "response headers exceeded"):
			a.bound, a.Limit = fmt.Sprintf("its headers went past %d bytes (-max-header-bytes)", r.cfg.MaxHeaderBytes), "headers"
		case errors.As(err, &oe) && oe.Op == "dial":
			a.unreached = true
		}
		a.NoAnswer, a.Error, a.Status, a.Response, a.BodySHA256, a.BodyBytes = true, shortErr(err), 0, "", "", 0
		if a.bound != "" {
			a.Error = a.bound
		}
	}
	if a.bound != "" {
		r.mu.Lock()
		if r.bound == "" {
			r.bound = fmt.Sprintf("an answer to %s %s went past a bound: %s", a.Method, a.URL, a.bound)
		}
		r.mu.Unlock()
	}
	return a
}

// limitedBuffer keeps the first max bytes written to it and drops the rest.
type limitedBuffer struct {
	b   *bytes.Buffer
	max int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.max - l.b.Len(); room > 0 {
		l.b.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

// replayHeaders are the headers servers use to mark a replayed answer.
var replayHeaders = []string{"Idempotent-Replayed", "Idempotency-Replayed", "X-Idempotent-Replayed", "X-Idempotency-Replayed", "Idempotency-Replay"}

// replayMarker is the first replay marker the answer carries, as
// "Name: value", or "".
func replayMarker(h http.Header) string {
	for _, name := range replayHeaders {
		if v := h.Get(name); v != "" {
			return name + ": " + v
		}
	}
	return ""
}

// hangUp closes the connection without reading the answer: the request
// happened, its answer is lost.
func (c *rawConn) hangUp() answer {
	c.conn.Close()
	a := answer{Record: c.rec}
	a.End = time.Now()
	a.NoAnswer, a.Error = true, "hung up before reading the answer"
	return a
}

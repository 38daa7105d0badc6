package web

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// A client that trickles its body is cut off once the body deadline
// passes, while a normal payment on the same server goes through.
func TestSlowBodyIsCutOff(t *testing.T) {
	const timeout = 300 * time.Millisecond
	env := newTestEnv(t, Config{BodyTimeout: timeout})

	conn, err := net.Dial("tcp", env.HTTP.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"order_id": "SLOW-1", "amount_satang": 100}` + strings.Repeat(" ", 200)
	fmt.Fprintf(conn, "POST /v1/payments HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nIdempotency-Key: slow-1\r\nContent-Length: %d\r\n\r\n",
		env.HTTP.Listener.Addr(), len(body))
	// One byte every 20 ms would take 5 s for the whole body; the server
	// must not wait that long. The loop ends when a write fails or the
	// body is out.
	start := time.Now()
	stop := make(chan struct{})
	go func() {
		for i := 0; i < len(body); i++ {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if _, err := conn.Write([]byte{body[i]}); err != nil {
				return
			}
		}
	}()
	defer close(stop)
	// A bound on the test itself, far beyond the body deadline, so that a
	// server that never cuts the client off fails instead of hanging.
	_ = conn.SetReadDeadline(time.Now().Add(4 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a trickled body within 4 s (the body deadline is %s): %v", timeout, err)
	}
	res.Body.Close()
	if res.StatusCode < 400 || res.StatusCode >= 500 {
		t.Fatalf("a trickled body got %d, want a 4xx", res.StatusCode)
	}
	if waited := time.Since(start); waited < timeout {
		t.Fatalf("cut off after %s, before the %s deadline", waited, timeout)
	}
	if n := env.charges(); n != 0 {
		t.Fatalf("%d charges from a body that never arrived", n)
	}

	// A normal client is fine.
	if r := env.pay("fast-1", articleBody); r.Status != http.StatusCreated {
		t.Fatalf("a normal payment: %d %s", r.Status, r.Body)
	}
}

// The deadline covers the upload only: a handler that runs well past it
// after reading its body keeps its context and answers, and a request
// without a body (an event stream) never has a read deadline at all.
func TestBodyDeadlineEndsWithTheBody(t *testing.T) {
	const timeout = 100 * time.Millisecond
	handler := bodyDeadline(timeout, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		select {
		case <-time.After(4 * timeout): // well past the body deadline
		case <-r.Context().Done():
			http.Error(w, "context ended: "+r.Context().Err().Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, "ok")
	}))
	srv := httptest.NewServer(handler)
	defer srv.Close()
	for _, body := range []io.Reader{strings.NewReader(`{"a":1}`), nil} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, body)
		r, err := do(req)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != http.StatusOK || string(r.Body) != "ok" {
			t.Fatalf("body %v: %d %s", body != nil, r.Status, r.Body)
		}
	}
}

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"paytwice/pay"
	"paytwice/store"
)

// TestShutdownFinishesPaymentsInFlight sends SIGTERM while a payment is
// at a slow gateway and a live page's event stream is open: the payment
// must still be answered 201, recorded once, the stream must end, and the
// process must exit on its own with status 0.
func TestShutdownFinishesPaymentsInFlight(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin := binary(t)
	dbPath := filepath.Join(dir, "shutdown.db")
	srv := startServer(ctx, t, bin, dbPath)
	if r := srv.do(ctx, http.MethodPatch, "/api/faults", "", `{"gateway":{"latency_ms":1000}}`); r.status != http.StatusOK {
		t.Fatalf("PATCH /api/faults: %d %s", r.status, r.body)
	}

	// A live page is open: its stream must not hold up the shutdown.
	streamEnded := openEventStream(ctx, t, srv.url)

	answer := make(chan result, 1)
	go func() {
		answer <- srv.do(ctx, http.MethodPost, "/v1/payments", "in-flight", `{"order_id":"S-1","amount_satang":100}`)
	}()
	// Signal once the key is claimed: the payment is then at the gateway.
	watch, err := store.Open(dbPath, store.Options{Schema: pay.SchemaPayments})
	if err != nil {
		t.Fatal(err)
	}
	// Bounded by ctx, not by a count of tries: on a loaded machine the
	// claim can take seconds.
	claimed := false
	for ctx.Err() == nil {
		if started, _, err := watch.KeyCounts(ctx); err == nil && started == 1 {
			claimed = true
			break
		}
		time.Sleep(time.Millisecond)
	}
	watch.Close()
	if !claimed {
		t.Fatal("the payment was never claimed")
	}
	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}

	r := <-answer
	if r.err != nil || r.status != http.StatusCreated {
		t.Fatalf("the payment in flight at shutdown got %v %d %s, want 201", r.err, r.status, r.body)
	}
	select {
	case <-streamEnded:
	case <-ctx.Done():
		t.Fatal("the event stream stayed open after SIGTERM")
	}
	select {
	case <-srv.exited:
	case <-ctx.Done():
		t.Fatalf("the server did not exit after SIGTERM: %s", srv.stderr.String())
	}
	if code := srv.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("exit code %d: %s", code, srv.stderr.String())
	}
	db, err := store.Open(dbPath, store.Options{Schema: pay.SchemaPayments})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	started, done, err := db.KeyCounts(ctx)
	n, _ := db.CountCharges(ctx)
	if err != nil || started != 0 || done != 1 || n != 1 {
		t.Fatalf("after shutdown: %d started, %d done, %d charges (%v)", started, done, n, err)
	}
}

// openEventStream opens GET /events, reads its first frame (the redraw) so
// that the stream is surely being served, then drains it in the
// background; the channel closes when the server ends the stream.
func openEventStream(ctx context.Context, t *testing.T, base string) <-chan struct{} {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /events: %d", res.StatusCode)
	}
	r := bufio.NewReader(res.Body)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the stream's first frame: %v", err)
		}
		if strings.HasPrefix(line, "event: frame") {
			break
		}
	}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		defer res.Body.Close()
		_, _ = io.Copy(io.Discard, r)
	}()
	return ended
}

// TestShutdownEndsHeldRequestsWithoutCharging sends SIGTERM while step
// mode holds 500 payments at their first checkpoint: nobody will step them
// any more, so the server ends them all at once without calling the
// gateway, answers every one 503 (a retry with the same key runs afresh),
// leaves no key started and no charge, and exits with status 0 (the time
// it took is logged; the README gives it).
func TestShutdownEndsHeldRequestsWithoutCharging(t *testing.T) {
	const held = 500
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dbPath := filepath.Join(t.TempDir(), "held.db")
	// Every request here comes from 127.0.0.1: the 500 held payments and
	// the polls of /api/step are one address, near its default share of
	// requests in flight (512). What is tested is the shutdown, not that
	// share (web's address bounds tests have it), so the share is raised
	// past anything this test can hold.
	srv := startServer(ctx, t, binary(t), dbPath, "-limits", "in-flight-per-address=65536,connections-per-address=65536")
	if r := srv.do(ctx, http.MethodPut, "/api/step", "", `{"on":true}`); r.status != http.StatusOK {
		t.Fatalf("PUT /api/step: %d %s", r.status, r.body)
	}
	answers := make(chan result, held)
	for i := range held {
		go func() {
			answers <- srv.do(ctx, http.MethodPost, "/v1/payments", fmt.Sprintf("held-%d", i), fmt.Sprintf(`{"order_id":"H-%d","amount_satang":100}`, i))
		}()
	}
	// Wait until every payment is held: GET /api/step lists them. The
	// wait is bounded by ctx: under -race on a loaded machine, 500
	// payments take seconds to reach their checkpoint.
	all := false
	for ctx.Err() == nil {
		r := srv.do(ctx, http.MethodGet, "/api/step", "", "")
		var st struct {
			Held []json.RawMessage `json:"held"`
		}
		if r.err == nil && json.Unmarshal(r.body, &st) == nil && len(st.Held) == held {
			all = true
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !all {
		t.Fatalf("%d payments were never all held", held)
	}
	sent := time.Now()
	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-srv.exited:
	case <-ctx.Done():
		t.Fatalf("the server did not exit after SIGTERM: %s", srv.stderr.String())
	}
	t.Logf("SIGTERM with %d held requests: exited %s later", held, time.Since(sent).Round(time.Millisecond))
	if code := srv.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("exit code %d: %s", code, srv.stderr.String())
	}
	for range held {
		if r := <-answers; r.err != nil || r.status != http.StatusServiceUnavailable || !strings.Contains(string(r.body), "nothing was charged") {
			t.Fatalf("a held payment at shutdown got %v %d %s, want 503 saying nothing was charged", r.err, r.status, r.body)
		}
	}
	db, err := store.Open(dbPath, store.Options{Schema: pay.SchemaPayments})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	started, done, err := db.KeyCounts(ctx)
	n, _ := db.CountCharges(ctx)
	if err != nil || started != 0 || done != 0 || n != 0 {
		t.Fatalf("after shutdown: %d started, %d done, %d charges (%v), want none: nobody stepped them", started, done, n, err)
	}
}

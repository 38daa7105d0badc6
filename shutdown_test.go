package main

import (
	"context"
	"net/http"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"paytwice/store"
)

// TestShutdownFinishesPaymentsInFlight sends SIGTERM while a payment is
// at a slow gateway: the payment must still be answered 201, recorded
// once, and the process must exit on its own.
func TestShutdownFinishesPaymentsInFlight(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "paytwice")
	if out, err := exec.CommandContext(ctx, goTool(t), "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	dbPath := filepath.Join(dir, "shutdown.db")
	srv := startServer(ctx, t, bin, dbPath)
	if r := srv.do(ctx, http.MethodPatch, "/api/faults", "", `{"gateway":{"latency_ms":1000}}`); r.status != http.StatusOK {
		t.Fatalf("PATCH /api/faults: %d %s", r.status, r.body)
	}

	answer := make(chan result, 1)
	go func() {
		answer <- srv.do(ctx, http.MethodPost, "/v1/payments", "in-flight", `{"order_id":"S-1","amount_satang":100}`)
	}()
	// Signal once the key is claimed: the payment is then at the gateway.
	watch, err := store.Open(dbPath, store.Options{Schema: store.SchemaPayments})
	if err != nil {
		t.Fatal(err)
	}
	claimed := false
	for range 2000 {
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
	case <-srv.exited:
	case <-ctx.Done():
		t.Fatalf("the server did not exit after SIGTERM: %s", srv.stderr.String())
	}
	if code := srv.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("exit code %d: %s", code, srv.stderr.String())
	}
	db, err := store.Open(dbPath, store.Options{Schema: store.SchemaPayments})
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

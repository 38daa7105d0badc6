package main

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A second server on a SQLite file another server is serving would sweep
// the first one's live claims at start-up: it is refused, and told where
// several servers belong.
func TestASecondServerOnOneSQLiteFileIsRefused(t *testing.T) {
	bin := binary(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dbPath := filepath.Join(t.TempDir(), "paytwice.db")
	first := startServer(ctx, t, bin, dbPath)

	cmd := exec.CommandContext(ctx, bin, "-addr", "127.0.0.1:0", "-db", dbPath)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(out), "another paytwice server is serving") ||
		!strings.Contains(string(out), "PostgreSQL") {
		t.Fatalf("second server: %v\n%s", err, out)
	}
	// The first one serves on, untouched.
	if r := first.do(ctx, "POST", "/v1/payments", "lock-1", `{"order_id":"L-1","amount_satang":100}`); r.err != nil || r.status != 201 {
		t.Fatalf("the first server after the refusal: %v %d %s", r.err, r.status, r.body)
	}
	// Once it has stopped, the file is free again.
	first.stop(t)
	again := startServer(ctx, t, bin, dbPath)
	again.stop(t)
}

// Two servers with payments files of their own but one SQLite gateway
// ledger would each find the other's charges under their own keys: the
// second is refused.
func TestASecondServerOnOneGatewayFileIsRefused(t *testing.T) {
	bin := binary(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	ledger := filepath.Join(dir, "gateway.db")
	first := startServer(ctx, t, bin, filepath.Join(dir, "a.db"), "-gateway-db", ledger)

	cmd := exec.CommandContext(ctx, bin, "-addr", "127.0.0.1:0", "-db", filepath.Join(dir, "b.db"), "-gateway-db", ledger)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(out), "as its gateway's ledger") {
		t.Fatalf("second server: %v\n%s", err, out)
	}
	if r := first.do(ctx, "POST", "/v1/payments", "ledger-1", `{"order_id":"G-1","amount_satang":100}`); r.err != nil || r.status != 201 {
		t.Fatalf("the first server after the refusal: %v %d %s", r.err, r.status, r.body)
	}
	first.stop(t)
	// Once it has stopped, the ledger is free for another server.
	again := startServer(ctx, t, bin, filepath.Join(dir, "b.db"), "-gateway-db", ledger)
	again.stop(t)
}

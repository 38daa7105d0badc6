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

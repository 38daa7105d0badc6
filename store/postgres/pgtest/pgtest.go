// Package pgtest gives each test a PostgreSQL database of its own.
//
// The server comes from PAYTWICE_TEST_POSTGRES, a URL whose role may
// create databases (for example
// postgres://paytwice:paytwice@127.0.0.1:5432/postgres). Without it the
// PostgreSQL tests skip, except with CI=true, where they fail: CI must
// never pass by running nothing.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// EnvURL names the environment variable that points the tests at a server.
const EnvURL = "PAYTWICE_TEST_POSTGRES"

// ServerURL returns the configured server's URL, or skips the test (fails
// it under CI=true) when there is none.
func ServerURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(EnvURL)
	if u == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and %s is not set: the PostgreSQL tests must run in CI", EnvURL)
		}
		t.Skipf("%s is not set; PostgreSQL tests skipped (see .ci/run)", EnvURL)
	}
	return u
}

// NewDatabase creates an empty database for this test and returns its
// URL; the database is dropped when the test ends, whatever connections
// are still open to it.
func NewDatabase(t testing.TB) string {
	t.Helper()
	server := ServerURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, server)
	if err != nil {
		t.Fatalf("connect to %s: %v", redact(server), err)
	}
	defer admin.Close(context.Background())
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	name := "paytwice_test_" + hex.EncodeToString(b)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, server)
		if err != nil {
			t.Errorf("drop database %s: %v", name, err)
			return
		}
		defer conn.Close(context.Background())
		drop := "DROP DATABASE IF EXISTS " + pgx.Identifier{name}.Sanitize()
		_, err = conn.Exec(ctx, drop+" WITH (FORCE)")
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "42501" {
			// FORCE may not end an autovacuum worker (a superuser's
			// process) that a large test table set to work; a plain DROP
			// ends autovacuum itself (and says so if the test left
			// connections of its own open).
			_, err = conn.Exec(ctx, drop)
		}
		if err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(server)
	if err != nil {
		t.Fatalf("%s: %v", EnvURL, err)
	}
	u.Path = "/" + name
	return u.String()
}

// redact hides the password of a URL for messages.
func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "the configured server"
	}
	return u.Redacted()
}

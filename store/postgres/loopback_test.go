package postgres_test

import (
	"context"
	neturl "net/url"
	"testing"

	"paytwice/store/postgres"
	"paytwice/store/postgres/pgtest"
)

// usesTLS reports whether db's connections to PostgreSQL are encrypted,
// as the server sees them.
func usesTLS(t *testing.T, db *postgres.DB) bool {
	t.Helper()
	var ssl bool
	if err := db.Pool().QueryRow(context.Background(), `SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()`).Scan(&ssl); err != nil {
		t.Fatal(err)
	}
	return ssl
}

// A server on the same machine as PostgreSQL talks to it without TLS
// unless its URL asks for TLS: PostgreSQL here offers TLS, and pgx's
// default would take it.
func TestLoopbackConnectionsArePlainUnlessTLSIsAskedFor(t *testing.T) {
	t.Setenv("PGSSLMODE", "")
	url := pgtest.NewDatabase(t)
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	if u.Query().Has("sslmode") {
		t.Skipf("PAYTWICE_TEST_POSTGRES names an sslmode (%s)", u.Query().Get("sslmode"))
	}
	db, err := postgres.Open(context.Background(), url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if usesTLS(t, db) {
		t.Fatalf("a loopback URL without sslmode (%s) connected with TLS", u.Redacted())
	}

	q := u.Query()
	q.Set("sslmode", "require")
	u.RawQuery = q.Encode()
	tlsDB, err := postgres.Open(context.Background(), u.String(), postgres.Options{})
	if err != nil {
		t.Skipf("this PostgreSQL offers no TLS: %v", err)
	}
	defer tlsDB.Close()
	if !usesTLS(t, tlsDB) {
		t.Fatal("sslmode=require connected without TLS")
	}
}

package postgres

import (
	"maps"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestPlainOnLoopback(t *testing.T) {
	t.Setenv("PGSSLMODE", "")
	for _, c := range []struct{ in, want string }{
		{"postgres://u:p@127.0.0.1:5432/pay", "postgres://u:p@127.0.0.1:5432/pay?sslmode=allow"},
		{"postgres://u:p@localhost/pay?pool_max_conns=4", "postgres://u:p@localhost/pay?pool_max_conns=4&sslmode=allow"},
		{"postgres://u@[::1]:5433/pay", "postgres://u@[::1]:5433/pay?sslmode=allow"},
		{"postgresql://127.0.0.2,127.0.0.3:5433/pay", "postgresql://127.0.0.2,127.0.0.3:5433/pay?sslmode=allow"},
		// Asked for, or not on this machine: as given.
		{"postgres://u:p@127.0.0.1/pay?sslmode=require", "postgres://u:p@127.0.0.1/pay?sslmode=require"},
		{"postgres://u:p@127.0.0.1/pay?sslmode=prefer", "postgres://u:p@127.0.0.1/pay?sslmode=prefer"},
		{"postgres://u:p@db.example.com/pay", "postgres://u:p@db.example.com/pay"},
		{"postgres://u:p@127.0.0.1,db.example.com/pay", "postgres://u:p@127.0.0.1,db.example.com/pay"},
		{"postgres://u:p@10.0.0.5/pay", "postgres://u:p@10.0.0.5/pay"},
		{"postgres:///pay", "postgres:///pay"}, // a Unix socket: no TLS anyway
	} {
		if got := plainOnLoopback(c.in); got != c.want {
			t.Errorf("plainOnLoopback(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	t.Setenv("PGSSLMODE", "require")
	if got := plainOnLoopback("postgres://u:p@127.0.0.1/pay"); got != "postgres://u:p@127.0.0.1/pay" {
		t.Errorf("with PGSSLMODE set: %q", got)
	}
}

// What pgx reads from a rewritten URL is what it reads from the URL as
// given, but for TLS: a value with a space, a query that pgx reads
// differently from Go's net/url, and a URL that asks for TLS in pgx's
// other spellings lose nothing.
func TestPlainOnLoopbackKeepsEverythingElse(t *testing.T) {
	t.Setenv("PGSSLMODE", "")
	for _, raw := range []string{
		"postgres://u:p@127.0.0.1/pay?options=-c%20search_path%3Dx&application_name=my%20app",
		"postgres://u:p%40ss%2Fw%20rd@127.0.0.1:5433/pay",
		"postgres://u:p@127.0.0.1/pay?password=a%2Bb%20c",
	} {
		given, err := pgconn.ParseConfig(raw)
		if err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		rewritten := plainOnLoopback(raw)
		got, err := pgconn.ParseConfig(rewritten)
		if err != nil {
			t.Fatalf("%s rewritten as %s: %v", raw, rewritten, err)
		}
		if got.TLSConfig != nil {
			t.Errorf("%s rewritten as %s still uses TLS", raw, rewritten)
		}
		if got.Host != given.Host || got.Port != given.Port || got.User != given.User || got.Password != given.Password ||
			got.Database != given.Database || !maps.Equal(got.RuntimeParams, given.RuntimeParams) {
			t.Errorf("%s rewritten as %s reads %+v, want %+v", raw, rewritten,
				[]any{got.Host, got.Port, got.User, got.Database, got.RuntimeParams}, []any{given.Host, given.Port, given.User, given.Database, given.RuntimeParams})
		}
	}
	for _, raw := range []string{
		"postgres://u:p@127.0.0.1/pay?ssl=true",                   // pgx's sslmode=require
		"postgres://u:p@127.0.0.1/pay?host=db.example.com",        // the host is not this machine
		"postgres://u:p@127.0.0.1/pay?sslrootcert=/etc/ca.pem",    // a certificate to check the server's with
		"postgres://u:p@127.0.0.1/pay?sslcert=c.pem&sslkey=k.pem", // a client certificate
	} {
		if got := plainOnLoopback(raw); got != raw {
			t.Errorf("plainOnLoopback(%q) = %q, want it as given", raw, got)
		}
	}
}

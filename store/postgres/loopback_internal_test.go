package postgres

import "testing"

func TestPlainOnLoopback(t *testing.T) {
	t.Setenv("PGSSLMODE", "")
	for _, c := range []struct{ in, want string }{
		{"postgres://u:p@127.0.0.1:5432/pay", "postgres://u:p@127.0.0.1:5432/pay?sslmode=disable"},
		{"postgres://u:p@localhost/pay?pool_max_conns=4", "postgres://u:p@localhost/pay?pool_max_conns=4&sslmode=disable"},
		{"postgres://u@[::1]:5433/pay", "postgres://u@[::1]:5433/pay?sslmode=disable"},
		{"postgresql://127.0.0.2,127.0.0.3:5433/pay", "postgresql://127.0.0.2,127.0.0.3:5433/pay?sslmode=disable"},
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

package postgres_test

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"paytwice/pay"
	"paytwice/store/postgres/pgtest"
)

// A claim that cannot get a connection says so as EUNAVAILABLE (a 503
// that asks for a retry with the same key), not as the server's own
// failure, and records nothing.
func TestClaimWithoutAConnectionIsUnavailable(t *testing.T) {
	ownDatabase(t)
	db := open(t, nil)
	admin, err := pgx.Connect(ctx, pgtest.ServerURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	name := db.Pool().Config().ConnConfig.Database
	// Refuse new connections, then end the pool's: the next claim must
	// connect, and is refused.
	if _, err := admin.Exec(ctx, `ALTER DATABASE `+pgx.Identifier{name}.Sanitize()+` ALLOW_CONNECTIONS false`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		admin.Exec(ctx, `ALTER DATABASE `+pgx.Identifier{name}.Sanitize()+` ALLOW_CONNECTIONS true`)
	})
	db.Pool().Reset()
	_, err = db.Claim(ctx, request("refused"))
	if code := pay.ErrorCode(err); code != pay.EUNAVAILABLE {
		t.Fatalf("claim without a connection: %v (code %s), want %s", err, code, pay.EUNAVAILABLE)
	}
	if msg := pay.ErrorMessage(err); !strings.Contains(msg, "retry with the same key") {
		t.Fatalf("message %q does not say what to do", msg)
	}
	if _, err := admin.Exec(ctx, `ALTER DATABASE `+pgx.Identifier{name}.Sanitize()+` ALLOW_CONNECTIONS true`); err != nil {
		t.Fatal(err)
	}
	res, err := db.Claim(ctx, request("refused"))
	if err != nil || !res.Claimed {
		t.Fatalf("claim once connections are allowed again: %+v, %v", res, err)
	}
}

package postgres

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"paytwice/pay"
	"paytwice/store/postgres/pgtest"
)

// The arguments direct writes in binary form reach PostgreSQL as the
// values pgx would have sent: PostgreSQL compares each with the same
// value sent through pgx's Query, and the row comes back through direct
// as it went.
func TestDirectArgumentsAreWhatPgxSends(t *testing.T) {
	t.Parallel() // on a database of its own, beside the others (ownDatabase)
	ctx := context.Background()
	db := mustOpenPayments(t, Options{})

	at := time.Date(2026, 12, 2, 3, 4, 5, 678901234, time.FixedZone("ICT", 7*3600))
	st := statement{name: "test_roundtrip", sql: `SELECT $1::text, $2::bigint, $3::int, $4::timestamptz, $5::bytea, $6::bytea IS NULL, $7::text`}
	var text, empty string
	var big int64
	var small int32
	var when time.Time
	var body []byte
	var null bool
	rows := 0
	_, err := db.direct(ctx, st, func(a *args) {
		a.text("ключ \"1\"").int(-1 << 40).int(201).time(at).bytes([]byte{0, 1, 255}).bytes(nil).text("")
	}, func(r directRow) error {
		rows++
		return r.scan(&text, &big, &small, &when, &body, &null, &empty)
	})
	if err != nil || rows != 1 {
		t.Fatalf("direct: %d rows, %v", rows, err)
	}
	if text != "ключ \"1\"" || big != -1<<40 || small != 201 || !when.Equal(at.Truncate(time.Microsecond)) ||
		string(body) != "\x00\x01\xff" || !null || empty != "" {
		t.Fatalf("came back as %q %d %d %v %x %v %q", text, big, small, when, body, null, empty)
	}

	var same bool
	err = db.pool.QueryRow(ctx, `SELECT $1::timestamptz = $2::timestamptz`, at, when).Scan(&same)
	if err != nil || !same {
		t.Fatalf("the timestamp direct wrote is not the one pgx writes: %v %v", same, err)
	}
}

// An argument of another type than the statement's parameter is an
// error before anything is sent, not a value PostgreSQL misreads; so is
// an integer that does not fit the parameter.
func TestDirectRefusesArgumentsOfAnotherType(t *testing.T) {
	t.Parallel() // on a database of its own, beside the others (ownDatabase)
	ctx := context.Background()
	db := mustOpenPayments(t, Options{})

	st := statement{name: "test_types", sql: `SELECT $1::bigint, $2::int`}
	for name, fill := range map[string]func(*args){
		"text for bigint":    func(a *args) { a.text("1").int(1) },
		"too large for int":  func(a *args) { a.int(1).int(1 << 40) },
		"too few arguments":  func(a *args) { a.int(1) },
		"too many arguments": func(a *args) { a.int(1).int(1).int(1) },
		"timestamp for int":  func(a *args) { a.int(1).time(time.Now()) },
		"bytes for bigint":   func(a *args) { a.bytes([]byte("1")).int(1) },
	} {
		_, err := db.direct(ctx, st, fill, nil)
		var pe *pgconn.PgError
		if err == nil || errors.As(err, &pe) || !strings.HasPrefix(err.Error(), "postgres: ") {
			t.Errorf("%s: %v, want the store's own error", name, err)
		}
	}
	// The connection is still usable afterwards.
	if _, err := db.direct(ctx, st, func(a *args) { a.int(1).int(2) }, nil); err != nil {
		t.Fatal(err)
	}
}

// A statement whose table changed under it fails once, as pgx's cached
// statements do, and is prepared afresh on the next call.
func TestDirectPreparesAgainAfterItsTableChanged(t *testing.T) {
	t.Parallel() // on a database of its own, beside the others (ownDatabase)
	ctx := context.Background()
	db := mustOpenPayments(t, Options{MaxConns: 1})
	if _, err := db.pool.Exec(ctx, `CREATE TABLE direct_test (a int); INSERT INTO direct_test VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	st := statement{name: "test_changed", sql: `SELECT * FROM direct_test`}
	columns := func() (int, error) {
		n := 0
		_, err := db.direct(ctx, st, func(*args) {}, func(r directRow) error { n = len(r.vals); return nil })
		return n, err
	}
	if n, err := columns(); err != nil || n != 1 {
		t.Fatalf("before: %d columns, %v", n, err)
	}
	if _, err := db.pool.Exec(ctx, `ALTER TABLE direct_test ADD COLUMN b int`); err != nil {
		t.Fatal(err)
	}
	var pe *pgconn.PgError
	if _, err := columns(); !errors.As(err, &pe) || pe.Code != "0A000" {
		t.Fatalf("first call after the change: %v, want 0A000", err)
	}
	if n, err := columns(); err != nil || n != 2 {
		t.Fatalf("after: %d columns, %v", n, err)
	}
}

// mustOpenPayments opens a store of the payment tables on a new database,
// closed when t ends.
func mustOpenPayments(t *testing.T, opts Options) *DB {
	t.Helper()
	opts.Schema = pay.SchemaPayments
	db, err := Open(context.Background(), pgtest.NewDatabase(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// Command bigdb writes a database as a server that ran for a long time
// leaves it: many done keys, each with its charge and the gateway's
// record, spread over a span of time that ends now. The scale benchmarks
// (bench/startup.sh, bench/yearofkeys.sh) run paytwice on what it writes.
//
// It writes the rows straight into the tables, in large transactions of
// INSERT … SELECT statements that the database itself expands: ten million
// keys through the API would take hours. The rows have the shape and the
// sizes of real ones (a token's scope, a UUID-sized key, a SHA-256
// fingerprint, a 201's body, a claim token), so the file's size per key is
// what a server's would be; the keys come in order within a scope, which
// fills the indexes' pages more tightly than random UUIDs would.
//
//	go run ./bench/bigdb -db /tmp/big.db -keys 10000000 -span 8760h
//	go run ./bench/bigdb -db postgres://…/bigdb -keys 10000000
//
// A SQLite -db gets its gateway's ledger next to it (big.db →
// big-gateway.db), as paytwice does; a PostgreSQL one keeps it in the same
// database.
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"paytwice/pay"
	"paytwice/store"
	"paytwice/store/postgres"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "modernc.org/sqlite"
)

func main() {
	dbArg := flag.String("db", "", "the SQLite file or the postgres:// URL to fill (created and migrated if new)")
	keys := flag.Int("keys", 10_000_000, "how many done keys to write, each with its charge and gateway record")
	span := flag.Duration("span", 365*24*time.Hour, "the keys' creation times spread evenly over this span, ending a minute ago")
	chunk := flag.Int("chunk", 500_000, "rows per transaction")
	flag.Parse()
	if *dbArg == "" || *keys <= 0 || *span <= 0 || *chunk <= 0 {
		flag.Usage()
		os.Exit(2)
	}
	end := time.Now().Add(-time.Minute)
	g := generator{keys: *keys, chunk: *chunk, startMs: end.Add(-*span).UnixMilli(), stepMs: float64(span.Milliseconds()) / float64(*keys)}
	ctx := context.Background()
	var err error
	if postgres.IsURL(*dbArg) {
		err = g.postgres(ctx, *dbArg)
	} else {
		err = g.sqlite(*dbArg)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bigdb:", err)
		os.Exit(1)
	}
}

type generator struct {
	keys, chunk int
	startMs     int64
	stepMs      float64
}

// The statements fill rows lo..hi-1 (the placeholders: lo, hi, startMs,
// stepMs). Every value is a function of the row's number i, so the key,
// the charge and the gateway's record of one payment agree.
const (
	sqliteSeries = `WITH RECURSIVE n(i) AS (SELECT ? UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?),
		r AS (SELECT i,
			'token:' || printf('%032x', i / 10000) AS scope, -- 10,000 keys a caller
			printf('%08x-0000-4000-8000-%012x', i / 10000, i) AS key,
			printf('A-%09d', i) AS order_id,
			printf('%024x', i) AS hex,
			CAST(? + i * ? AS INTEGER) AS ms FROM n)`
	sqliteKeys = sqliteSeries + `
		INSERT INTO idempotency_keys (scope, key, method, path, fingerprint, order_id, amount_satang, status,
			response_status, response_body, created_at, locked_at, completed_at, claim, charge_key)
		SELECT scope, key, 'POST', '/v1/payments', printf('%064x', i), order_id, 129900, 'done', 201,
			'{"charge_id":"ch_' || hex || '","status":"paid","order_id":"' || order_id ||
			'","amount_satang":129900,"gateway_ref":"gw_' || hex || '","created_at":"' ||
			strftime('%Y-%m-%dT%H:%M:%fZ', ms / 1000.0, 'unixepoch') || '"}',
			ms, ms, ms + 40, printf('%032x', i), ''
		FROM r`
	sqliteCharges = sqliteSeries + `
		INSERT INTO charges (id, scope, idempotency_key, order_id, amount_satang, gateway_ref, created_at)
		SELECT 'ch_' || hex, scope, key, order_id, 129900, 'gw_' || hex, ms + 40 FROM r`
	sqliteGateway = sqliteSeries + `
		INSERT INTO gateway_charges (key, id, order_id, amount_satang, created_at)
		SELECT scope || '|' || key, 'gw_' || hex, order_id, 129900, ms + 20 FROM r`
)

func (g generator) sqlite(path string) error {
	gatewayPath := strings.TrimSuffix(path, ".db") + "-gateway.db"
	for _, f := range []struct {
		path   string
		schema pay.Schema
		fills  []string
	}{
		{path, pay.SchemaPayments, []string{sqliteKeys, sqliteCharges}},
		{gatewayPath, pay.SchemaLedger, []string{sqliteGateway}},
	} {
		// paytwice's own store creates the file and its tables.
		db, err := store.Open(f.path, store.Options{Schema: f.schema})
		if err != nil {
			return err
		}
		if err := db.Close(); err != nil {
			return err
		}
		raw, err := sql.Open("sqlite", "file:"+f.path+"?_pragma=journal_mode(WAL)&_pragma=synchronous(OFF)&_pragma=cache_size(-262144)&_pragma=temp_store(MEMORY)")
		if err != nil {
			return err
		}
		raw.SetMaxOpenConns(1)
		for _, fill := range f.fills {
			if err := g.fill(raw, fill, f.path); err != nil {
				raw.Close()
				return err
			}
		}
		if _, err := raw.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
			raw.Close()
			return err
		}
		if err := raw.Close(); err != nil {
			return err
		}
	}
	return nil
}

func (g generator) fill(raw *sql.DB, stmt, path string) error {
	t0 := time.Now()
	for lo := 0; lo < g.keys; lo += g.chunk {
		hi := min(lo+g.chunk, g.keys)
		if _, err := raw.Exec(stmt, lo, hi, g.startMs, g.stepMs); err != nil {
			return fmt.Errorf("%s rows %d–%d: %w", path, lo, hi, err)
		}
		fmt.Fprintf(os.Stderr, "\r%s: %d rows, %.0fs", path, hi, time.Since(t0).Seconds())
	}
	fmt.Fprintln(os.Stderr)
	return nil
}

// PostgreSQL: the same rows from generate_series, the ledger in the
// gateway schema of the same database (gateway.charges), as paytwice
// keeps it there.
const (
	pgSeries = `WITH r AS (SELECT i,
			'token:' || lpad(to_hex(i / 10000), 32, '0') AS scope,
			lpad(to_hex(i / 10000), 8, '0') || '-0000-4000-8000-' || lpad(to_hex(i), 12, '0') AS key,
			'A-' || lpad(i::text, 9, '0') AS order_id,
			lpad(to_hex(i), 24, '0') AS hex,
			($3::bigint + (i * $4::float8)::bigint) AS ms
		FROM generate_series($1::bigint, $2::bigint - 1) AS i)`
	pgKeys = pgSeries + `
		INSERT INTO idempotency_keys (scope, key, method, path, fingerprint, order_id, amount_satang, status,
			response_status, response_body, created_at, locked_at, completed_at, claim, charge_key)
		SELECT scope, key, 'POST', '/v1/payments', lpad(to_hex(i), 64, '0'), order_id, 129900, 'done'::key_status, 201,
			convert_to('{"charge_id":"ch_' || hex || '","status":"paid","order_id":"' || order_id ||
			'","amount_satang":129900,"gateway_ref":"gw_' || hex || '","created_at":"' ||
			to_char(to_timestamp(ms / 1000.0) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') || '"}', 'UTF8'),
			%s, %s, %s, lpad(to_hex(i), 32, '0'), ''
		FROM r`
	pgCharges = pgSeries + `
		INSERT INTO charges (id, scope, idempotency_key, order_id, amount_satang, gateway_ref, created_at)
		SELECT 'ch_' || hex, scope, key, order_id, 129900, 'gw_' || hex, %s FROM r`
	pgGateway = pgSeries + `
		INSERT INTO gateway.charges (key, id, order_id, amount_satang, created_at)
		SELECT scope || '|' || key, 'gw_' || hex, order_id, 129900, %s FROM r`
)

func (g generator) postgres(ctx context.Context, url string) error {
	db, err := postgres.Open(ctx, url, postgres.Options{Schema: pay.SchemaAll})
	if err != nil {
		return err
	}
	db.Close()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	// The columns' types decide how a time is written: milliseconds in a
	// bigint, or a timestamptz.
	ts := func(table, column, plusMs string) string {
		var typ string
		schema := "public"
		if table == "gateway.charges" {
			schema, table = "gateway", "charges"
		}
		pool.QueryRow(ctx, `SELECT data_type FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2 AND column_name = $3`, schema, table, column).Scan(&typ)
		if strings.HasPrefix(typ, "timestamp") {
			return "to_timestamp((ms + " + plusMs + ") / 1000.0)"
		}
		return "ms + " + plusMs
	}
	fills := []string{
		fmt.Sprintf(pgKeys, ts("idempotency_keys", "created_at", "0"), ts("idempotency_keys", "locked_at", "0"), ts("idempotency_keys", "completed_at", "40")),
		fmt.Sprintf(pgCharges, ts("charges", "created_at", "40")),
		fmt.Sprintf(pgGateway, ts("gateway.charges", "created_at", "20")),
	}
	for _, fill := range fills {
		t0 := time.Now()
		for lo := 0; lo < g.keys; lo += g.chunk {
			hi := min(lo+g.chunk, g.keys)
			if _, err := pool.Exec(ctx, fill, lo, hi, g.startMs, g.stepMs); err != nil {
				return fmt.Errorf("rows %d–%d: %w", lo, hi, err)
			}
			fmt.Fprintf(os.Stderr, "\rpostgres: %d rows, %.0fs", hi, time.Since(t0).Seconds())
		}
		fmt.Fprintln(os.Stderr)
	}
	_, err = pool.Exec(ctx, `VACUUM ANALYZE`)
	return err
}

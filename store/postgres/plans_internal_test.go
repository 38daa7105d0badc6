package postgres

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestKeyStatementsReadTheKeysIndexBeforeAutovacuum runs a claim and a
// save, prepared on one connection as the store prepares them, on a new
// database: first on the empty tables (PostgreSQL keeps a plan for a
// prepared statement after a few runs), then after 20,000 keys of one
// scope were added, with autovacuum off for the tables (the wait for its
// workers, which can be long). The key's look-ups must take the primary
// key (scope, key), not the index of orders (scope, order_id) with the
// key as a filter, which reads every key of the scope for each payment.
func TestKeyStatementsReadTheKeysIndexBeforeAutovacuum(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := mustOpenPayments(t, Options{})
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec(`ALTER TABLE idempotency_keys SET (autovacuum_enabled = false)`)
	exec(`ALTER TABLE charges SET (autovacuum_enabled = false)`)
	now := time.Now()
	claim := func(key string) []any {
		return []any{"class", key, "POST", "/v1/payments", "f", "order-" + key, int64(1000), now, "c", key, "server",
			int64(0), key}
	}
	save := func(key string) []any {
		return []any{201, []byte("{}"), now, "class", key, "c", "ch_" + key, key, "order-" + key, int64(1000), "ref", now}
	}
	for _, st := range []statement{claimStatement, saveStatement} {
		if _, err := conn.Conn().Prepare(ctx, st.name, st.sql); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 10 {
		key := fmt.Sprintf("first-%d", i)
		exec(claimStatement.name, claim(key)...)
		exec(saveStatement.name, save(key)...)
	}
	exec(`INSERT INTO idempotency_keys (scope, key, method, path, fingerprint, order_id, amount_satang, status,
			created_at, locked_at, claim)
		SELECT 'class', 'key-' || i, 'POST', '/v1/payments', 'f', 'order-key-' || i, 1000, 'done', now(), now(), 'c'
		FROM generate_series(1, 20000) i`)
	for _, plan := range []struct {
		name string
		sql  string
		args []any
	}{
		{"claim", `EXPLAIN EXECUTE ` + claimStatement.name + `($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)`, claim("key-new")},
		{"save", `EXPLAIN EXECUTE ` + saveStatement.name + `($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`, save("key-1")},
	} {
		// The simple protocol writes the arguments into the text: EXECUTE
		// takes no parameters of its own.
		rows, err := conn.Query(ctx, plan.sql, append([]any{pgx.QueryExecModeSimpleProtocol}, plan.args...)...)
		if err != nil {
			t.Fatalf("%s: %v", plan.name, err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatalf("%s: %v", plan.name, err)
		}
		text := strings.Join(lines, "\n")
		if strings.Contains(text, "_scope_order") || strings.Contains(text, "_order_scope") || !strings.Contains(text, "idempotency_keys_pkey") {
			t.Errorf("the %s's look-up of the key does not take the primary key:\n%s", plan.name, text)
		}
	}
}

package postgres

import (
	"context"
	"strings"
	"testing"
)

// The live pages' model reads the newest charges each time it loads,
// which with several servers under load is about once a second each:
// PostgreSQL finds them through the index of charges by time, not by
// sorting the table, which grows with every payment and is never pruned
// (see migration 010).
func TestTheNewestChargesAreReadThroughAnIndex(t *testing.T) {
	t.Parallel() // on a database of its own, beside the others (ownDatabase)
	ctx := context.Background()
	db := mustOpenPayments(t, Options{})
	if _, err := db.pool.Exec(ctx, `INSERT INTO charges (id, scope, idempotency_key, order_id, amount_satang, gateway_ref, created_at)
		SELECT 'ch_' || g, 'anonymous', 'key-' || g, 'A-' || g, 100, 'gw_' || g, now() - g * interval '1 ms'
		FROM generate_series(1, 50000) g`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.pool.Exec(ctx, `ANALYZE charges`); err != nil {
		t.Fatal(err)
	}
	var plan strings.Builder
	rows, err := db.pool.Query(ctx, `EXPLAIN `+recentChargesSQL, 5000)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan.WriteString(line + "\n")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(plan.String(), "charges_created") || strings.Contains(plan.String(), "Seq Scan") {
		t.Fatalf("the newest 5,000 of 50,000 charges are not read through the index by time:\n%s", plan.String())
	}
	got, err := db.RecentCharges(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].ID != "ch_1" || got[1].ID != "ch_2" || got[2].ID != "ch_3" {
		t.Fatalf("the newest three: %+v", got)
	}
}

package storetest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"paytwice/pay"
)

func readsAndReset(t *testing.T, open Open) {
	clock := newClock()
	db := open(t, clock.Now)
	complete(t, db, "paid", claim(t, db, "paid"), clock.Now())
	clock.Advance(time.Second)
	claim(t, db, "running")

	if k, err := db.GetKey(ctx, "s", "paid"); err != nil || k.Status != pay.StatusDone || k.ResponseStatus != 201 {
		t.Fatalf("get paid: %+v %v", k, err)
	}
	if _, err := db.GetKey(ctx, "other scope", "paid"); pay.ErrorCode(err) != pay.ENOTFOUND {
		t.Fatalf("a key is read in another caller's scope: %v", err)
	}
	keys, err := db.RecentKeys(ctx, 10)
	if err != nil || len(keys) != 2 || keys[0].Key != "running" {
		t.Fatalf("recent keys, newest first: %+v %v", keys, err)
	}
	if keys, err := db.RecentKeys(ctx, 1); err != nil || len(keys) != 1 {
		t.Fatalf("recent keys within the limit: %+v %v", keys, err)
	}
	if started, done, err := db.KeyCounts(ctx); err != nil || started != 1 || done != 1 {
		t.Fatalf("key counts %d started, %d done, %v; want 1, 1", started, done, err)
	}
	recent, err := db.RecentCharges(ctx, 10)
	if err != nil || len(recent) != 1 || recent[0].Key != "paid" || recent[0].OrderID != "A-1" {
		t.Fatalf("recent charges: %+v %v", recent, err)
	}
	if ch, err := db.GetCharge(ctx, "s", recent[0].ID); err != nil || ch.ID != recent[0].ID || ch.AmountSatang != 100 {
		t.Fatalf("get charge: %+v %v", ch, err)
	}
	if _, err := db.GetCharge(ctx, "other scope", recent[0].ID); pay.ErrorCode(err) != pay.ENOTFOUND {
		t.Fatalf("a charge is read in another caller's scope: %v", err)
	}
	if byOrder, err := db.ChargesByOrder(ctx, "s", "A-1"); err != nil || len(byOrder) != 1 {
		t.Fatalf("charges of A-1: %+v %v", byOrder, err)
	}

	if err := db.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	started, done, err := db.KeyCounts(ctx)
	if err != nil || started != 0 || done != 0 || charges(t, db) != 0 {
		t.Fatalf("after reset: %d started, %d done, %d charges, %v", started, done, charges(t, db), err)
	}
	if _, ok := db.CachedResponse("s", "paid"); ok {
		t.Fatal("a reset key is still in the replay cache")
	}
}

// labCharge is a charge the lab records on its own behalf.
func labCharge(mode, id string, now time.Time) pay.Charge {
	return pay.Charge{ID: pay.NewID("ch_"), Scope: "s", Key: pay.LabKeyPrefix + mode + id, OrderID: "B-" + id,
		AmountSatang: 100, GatewayRef: "gw " + id, CreatedAt: now}
}

func labWrites(t *testing.T, open Open) {
	clock := newClock()
	db := open(t, clock.Now)

	// Check first, then insert, with the constraints in place: the second
	// insert of a key is refused by the table, not by the code.
	if _, err := db.LabInsertKeyUnguarded(ctx, request("k")); err != nil {
		t.Fatal(err)
	}
	if _, err := db.LabInsertKeyUnguarded(ctx, request("k")); !errors.Is(err, pay.ErrConstraint) {
		t.Fatalf("a second unguarded insert of a key: %v, want ErrConstraint", err)
	}

	// No key at all: a charge of its own per request, under the lab's
	// prefix only.
	if err := db.LabRecordCharge(ctx, pay.Charge{ID: pay.NewID("ch_"), Scope: "s", Key: "client key", OrderID: "B-1",
		AmountSatang: 100, GatewayRef: "gw", CreatedAt: clock.Now()}); err == nil {
		t.Fatal("a lab charge without the lab's prefix was recorded")
	}
	if err := db.LabRecordCharge(ctx, labCharge("no-key ", "1", clock.Now())); err != nil {
		t.Fatal(err)
	}

	// The key table without constraints takes the same key twice, and
	// its charges pile up.
	r := request("loose")
	first, rows, err := db.LabLooseInsertKey(ctx, r, "req 1")
	if err != nil || rows != 1 {
		t.Fatalf("first loose insert: %d rows, %v", rows, err)
	}
	clock.Advance(time.Millisecond)
	second, rows, err := db.LabLooseInsertKey(ctx, r, "req 2")
	if err != nil || rows != 2 || second == first {
		t.Fatalf("second loose insert: row %d (first %d), %d rows, %v", second, first, rows, err)
	}
	if k, found, err := db.LabLooseFindKey(ctx, "s", "loose"); err != nil || !found || k.RowID != first || k.Status != pay.StatusStarted {
		t.Fatalf("find of two started rows, want the oldest: %+v %v %v", k, found, err)
	}
	// A third row, released while started: the key keeps its two.
	third, rows, err := db.LabLooseInsertKey(ctx, r, "req 3")
	if err != nil || rows != 3 {
		t.Fatalf("third loose insert: %d rows, %v", rows, err)
	}
	if err := db.LabLooseRelease(ctx, third); err != nil {
		t.Fatalf("releasing the third row: %v", err)
	}
	fourth, rows, err := db.LabLooseInsertKey(ctx, r, "req 4")
	if err != nil || rows != 3 {
		t.Fatalf("an insert after the release: %d rows (%v), want 3: the released row is gone", rows, err)
	}
	if err := db.LabLooseRelease(ctx, fourth); err != nil {
		t.Fatalf("releasing the fourth row: %v", err)
	}
	if k, found, err := db.LabLooseFindKey(ctx, "s", "loose"); err != nil || !found || k.RowID != first {
		t.Fatalf("find after a release: %+v %v %v", k, found, err)
	}
	for i, row := range []int64{second, first} {
		ch := charge(clock.Now())
		ch.Scope, ch.Key = "s", "loose"
		n, err := db.LabLooseComplete(ctx, row, 201, ch.ResponseBody(), ch, "req")
		if err != nil || n != i+1 {
			t.Fatalf("loose completion %d: %d charges, %v", i+1, n, err)
		}
	}
	if k, found, err := db.LabLooseFindKey(ctx, "s", "loose"); err != nil || !found || k.Status != pay.StatusDone || k.ResponseStatus != 201 {
		t.Fatalf("find after completion: %+v %v %v", k, found, err)
	}
	if _, found, err := db.LabLooseFindKey(ctx, "s", "nothing"); err != nil || found {
		t.Fatalf("find of a key never inserted: %v %v", found, err)
	}
	if loose, err := db.LabLooseCharges(ctx); err != nil || len(loose) != 2 {
		t.Fatalf("loose charges: %+v %v", loose, err)
	}

	if err := db.LabReset(ctx); err != nil {
		t.Fatal(err)
	}
	if loose, err := db.LabLooseCharges(ctx); err != nil || len(loose) != 0 {
		t.Fatalf("loose charges after the lab's reset: %+v %v", loose, err)
	}
	if _, found, err := db.LabLooseFindKey(ctx, "s", "loose"); err != nil || found {
		t.Fatalf("a loose key after the lab's reset: %v %v", found, err)
	}
	if n := charges(t, db); n != 1 {
		t.Fatalf("the lab's reset touched the charges table: %d charges, want 1", n)
	}
}

func labMeasure(t *testing.T, open Open) {
	clock := newClock()
	db := open(t, clock.Now)
	for _, id := range []string{"1", "2"} {
		ch := labCharge("no-key ", id, clock.Now())
		ch.OrderID = "B-1"
		if err := db.LabRecordCharge(ctx, ch); err != nil {
			t.Fatal(err)
		}
	}
	// One order paid under two client keys.
	complete(t, db, "first", claim(t, db, "first"), clock.Now())
	clock.Advance(time.Second)
	complete(t, db, "second", claim(t, db, "second"), clock.Now())
	if _, _, err := db.LabLooseInsertKey(ctx, request("loose"), "req"); err != nil {
		t.Fatal(err)
	}

	g, err := db.LabMeasure(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(g.NoKey) != 1 || g.NoKey[0].OrderID != "B-1" || g.NoKey[0].Charges != 2 {
		t.Errorf("no-key groups: %+v, want B-1 charged twice", g.NoKey)
	}
	if len(g.KeyOnly) != 0 || len(g.Loose) != 0 {
		t.Errorf("key-only %+v, loose %+v, want none", g.KeyOnly, g.Loose)
	}
	if len(g.ManyKeys) != 1 || g.ManyKeys[0].OrderID != "A-1" || g.ManyKeys[0].Keys != 2 || g.ManyKeys[0].Saved500 {
		t.Errorf("orders under many keys: %+v, want A-1 under 2 keys", g.ManyKeys)
	}
	if g.LooseKeyRows != 1 {
		t.Errorf("loose key rows %d, want 1", g.LooseKeyRows)
	}

	// LabRows: every charge of both tables and every loose key row, each
	// once, with its table, key, order and time.
	var rows []pay.LabRow
	if err := db.LabRows(ctx, func(r pay.LabRow) { rows = append(rows, r) }); err != nil {
		t.Fatal(err)
	}
	byTable := map[pay.LabTable][]string{}
	for _, r := range rows {
		byTable[r.Table] = append(byTable[r.Table], r.Key+" "+r.OrderID)
		if r.ID == "" || r.Scope == "" || r.CreatedAt.IsZero() || r.Saved500 {
			t.Errorf("row %+v: want an id, a scope, a time and no saved 500", r)
		}
	}
	slices.Sort(byTable[pay.LabCharges])
	if want := []string{"first A-1", pay.LabKeyPrefix + "no-key 1 B-1", pay.LabKeyPrefix + "no-key 2 B-1", "second A-1"}; !slices.Equal(byTable[pay.LabCharges], want) ||
		len(byTable[pay.LabLooseCharges]) != 0 || !slices.Equal(byTable[pay.LabLooseKeys], []string{"loose A-1"}) {
		t.Errorf("LabRows: %v, want charges %v and the loose key row", byTable, want)
	}

	seen := map[string][]string{}
	if err := db.LabScanKeys(ctx, func(where, key string) { seen[where] = append(seen[where], key) }); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(seen[pay.WhereKeyTable], "first") || !slices.Contains(seen[pay.WhereCharges], "second") ||
		!slices.Contains(seen[pay.WhereCharges], pay.LabKeyPrefix+"no-key 1") {
		t.Errorf("keys found: %v", seen)
	}
}

package postgres_test

import (
	"errors"
	"flag"
	"fmt"
	neturl "net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"context"
	"paytwice/pay"
	"testing"
	"time"

	"paytwice/store/postgres"
	"paytwice/store/postgres/pgtest"
	"paytwice/store/storetest"
)

// open opens a store on a fresh database of its own.
func open(t *testing.T, now func() time.Time) *postgres.DB {
	t.Helper()
	db, err := postgres.Open(context.Background(), pgtest.NewDatabase(t), postgres.Options{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// TestMain lets the tests on databases of their own (ownDatabase) run
// more at once than the machine has cores: their time goes mostly in
// PostgreSQL making and dropping their databases and in its lock waits,
// not in this process. An explicit -parallel wins.
func TestMain(m *testing.M) {
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		_ = flag.Set("test.parallel", strconv.Itoa(max(6, runtime.GOMAXPROCS(0))))
	}
	os.Exit(m.Run())
}

// ownDatabase marks a test that works only on databases of its own
// (pgtest.NewDatabase) and asserts no real time but lower bounds: it runs
// beside the other such tests (t.Parallel), after the package's tests
// that change the process's environment. Call it first.
func ownDatabase(t *testing.T) {
	t.Helper()
	t.Parallel()
}

func TestContract(t *testing.T) {
	ownDatabase(t)
	storetest.Run(t, func(t *testing.T, now func() time.Time) storetest.Backend { return open(t, now) })
}

var ctx = context.Background()

// servers opens n stores on one fresh database, as n servers would, all
// starting at once: the migrations must run once and every start succeed.
func servers(t *testing.T, n int, opts postgres.Options) []*postgres.DB {
	t.Helper()
	url := pgtest.NewDatabase(t)
	dbs := make([]*postgres.DB, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dbs[i], errs[i] = postgres.Open(ctx, url, opts)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("server %d: %v", i, err)
		}
		t.Cleanup(func() { dbs[i].Close() })
	}
	return dbs
}

func TestServersStartingTogetherMigrateOnce(t *testing.T) {
	ownDatabase(t)
	dbs := servers(t, 6, postgres.Options{})
	var applied, distinct int
	if err := dbs[0].Pool().QueryRow(ctx, `SELECT count(*), count(DISTINCT name) FROM schema_migrations`).Scan(&applied, &distinct); err != nil {
		t.Fatal(err)
	}
	if applied != distinct || applied == 0 {
		t.Fatalf("%d migrations recorded, %d distinct", applied, distinct)
	}
	// A later start finds everything applied.
	if _, err := postgres.Open(ctx, dbs[0].Pool().Config().ConnString(), postgres.Options{}); err != nil {
		t.Fatal(err)
	}
}

func request(key string) pay.ClaimRequest {
	return pay.ClaimRequest{Scope: "s", Key: key, Method: "POST", Path: "/v1/payments", Fingerprint: "fp", OrderID: "A-1", AmountSatang: 100}
}

func TestOneKeyClaimedOnceAcrossServers(t *testing.T) {
	ownDatabase(t)
	dbs := servers(t, 3, postgres.Options{})
	const perServer = 20
	var won, lost int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, db := range dbs {
		for range perServer {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := db.Claim(ctx, request("k"))
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					t.Error(err)
				case res.Claimed:
					won++
				default:
					lost++
				}
			}()
		}
	}
	wg.Wait()
	if won != 1 || lost != 3*perServer-1 {
		t.Fatalf("%d claims won and %d lost, want 1 and %d", won, lost, 3*perServer-1)
	}
}

func TestSweepersOnTwoServersNeverTakeTheSameKey(t *testing.T) {
	ownDatabase(t)
	dbs := servers(t, 2, postgres.Options{})
	const stuck = 200
	for i := range stuck {
		if res, err := dbs[0].Claim(ctx, request(fmt.Sprint("k", i))); err != nil || !res.Claimed {
			t.Fatalf("claim: %+v %v", res, err)
		}
	}
	cutoff := time.Now().Add(time.Hour)
	taken := make([][]pay.KeyRow, len(dbs))
	var wg sync.WaitGroup
	for i, db := range dbs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each sweeper asks twice: what it took stays its own.
			for range 2 {
				rows, err := db.StartedBefore(ctx, cutoff)
				if err != nil {
					t.Error(err)
					return
				}
				taken[i] = append(taken[i], rows...)
			}
		}()
	}
	wg.Wait()
	owner := map[string]int{}
	for i, rows := range taken {
		for _, r := range rows {
			if o, ok := owner[r.Key]; ok && o != i {
				t.Fatalf("key %s taken by servers %d and %d", r.Key, o, i)
			}
			owner[r.Key] = i
		}
	}
	if len(owner) != stuck {
		t.Fatalf("%d of %d stuck keys taken", len(owner), stuck)
	}
	// Once a server's lease is over, another may take its keys.
	if _, err := dbs[0].Pool().Exec(ctx, `UPDATE idempotency_keys SET sweep_until = clock_timestamp() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	if rows, err := dbs[1].StartedBefore(ctx, cutoff); err != nil || len(rows) != stuck {
		t.Fatalf("after the leases ended a sweeper took %d keys (%v), want all %d", len(rows), err, stuck)
	}
	if rows, err := dbs[0].StartedBefore(ctx, cutoff); err != nil || len(rows) != 0 {
		t.Fatalf("server 0 took %d keys (%v) that server 1's lease holds", len(rows), err)
	}
}

func TestGatewayLedgerIsIdempotentAcrossServers(t *testing.T) {
	ownDatabase(t)
	dbs := servers(t, 3, postgres.Options{Schema: pay.SchemaLedger})
	var wg sync.WaitGroup
	ids := make(chan string, 30)
	for i := range 30 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g := pay.GatewayCharge{Key: "s|k", ID: pay.NewID("gw_"), OrderID: "A-1", AmountSatang: 100, CreatedAt: time.Now()}
			got, _, err := dbs[i%3].RecordGatewayCharge(ctx, g)
			if err != nil {
				t.Error(err)
				return
			}
			ids <- got.ID
		}()
	}
	wg.Wait()
	close(ids)
	first := <-ids
	for id := range ids {
		if id != first {
			t.Fatalf("the gateway answered %s and %s for one key", first, id)
		}
	}
	if n, err := dbs[0].CountGatewayCharges(ctx); err != nil || n != 1 {
		t.Fatalf("%d gateway records (%v), want 1", n, err)
	}
	if _, err := dbs[0].Claim(ctx, request("k")); err == nil {
		t.Fatal("a ledger-only store accepted a claim")
	}
}

func TestLabWritesOnPostgres(t *testing.T) {
	ownDatabase(t)
	db := open(t, time.Now)
	c := request("lab-k")
	if _, err := db.LabInsertKeyUnguarded(ctx, c); err != nil {
		t.Fatal(err)
	}
	if _, err := db.LabInsertKeyUnguarded(ctx, c); !errors.Is(err, pay.ErrConstraint) {
		t.Fatalf("a second unguarded insert of one key: %v, want the constraint's refusal", err)
	}
	for i := range 2 {
		id, rows, err := db.LabLooseInsertKey(ctx, c, fmt.Sprint("rq", i))
		if err != nil || rows != i+1 {
			t.Fatalf("loose insert %d: %d rows, %v", i, rows, err)
		}
		ch := &pay.Charge{ID: pay.NewID("ch_"), Scope: "s", Key: "lab-k", OrderID: "A-1", AmountSatang: 100, GatewayRef: fmt.Sprint("gw", i), CreatedAt: time.Now()}
		if n, err := db.LabLooseComplete(ctx, id, 201, []byte("{}"), ch, fmt.Sprint("rq", i)); err != nil || n != i+1 {
			t.Fatalf("loose complete %d: %d charges, %v", i, n, err)
		}
	}
	if list, err := db.ChargesByOrder(ctx, "s", "A-1"); err != nil || len(list) != 2 {
		t.Fatalf("an order's look-up finds %d of the unguarded table's 2 charges (%v)", len(list), err)
	}
	if k, ok, err := db.LabLooseFindKey(ctx, "s", "lab-k"); err != nil || !ok || k.Status != pay.StatusDone {
		t.Fatalf("loose find: %+v %v %v", k, ok, err)
	}
	for i := range 2 {
		ch := pay.Charge{ID: pay.NewID("ch_"), Scope: "s", Key: pay.LabKeyPrefix + "no-key " + fmt.Sprint(i), OrderID: "B-1", AmountSatang: 100, GatewayRef: "gw", CreatedAt: time.Now()}
		if err := db.LabRecordCharge(ctx, ch); err != nil {
			t.Fatal(err)
		}
	}
	var order []pay.LabRow
	if err := db.LabOrderRows(ctx, "s", "B-1", func(r pay.LabRow) { order = append(order, r) }); err != nil || len(order) != 2 ||
		order[0].OrderID != "B-1" || order[0].Table != pay.LabCharges {
		t.Fatalf("an order's lab rows: %+v (%v), want B-1's 2 charges", order, err)
	}
	g, err := db.LabMeasure(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(g.NoKey) != 1 || g.NoKey[0].Charges != 2 || len(g.Loose) != 1 || g.Loose[0].Charges != 2 || g.LooseKeyRows != 2 {
		t.Fatalf("lab measure: %+v", g)
	}
	seen := map[string]int{}
	if err := db.LabScanKeys(ctx, func(where, key string) { seen[where]++ }); err != nil {
		t.Fatal(err)
	}
	if seen[pay.WhereKeyTable] != 1 || seen[pay.WhereCharges] != 4 {
		t.Fatalf("lab scan: %v", seen)
	}
	if err := db.LabReset(ctx); err != nil {
		t.Fatal(err)
	}
	if g, err := db.LabMeasure(ctx); err != nil || len(g.Loose) != 0 || g.LooseKeyRows != 0 {
		t.Fatalf("after the lab's reset: %+v %v", g, err)
	}
}

func TestAWarpedClockNeverSweepsAnotherServersFreshKey(t *testing.T) {
	ownDatabase(t)
	url := pgtest.NewDatabase(t)
	openWith := func(now func() time.Time) *postgres.DB {
		db, err := postgres.Open(ctx, url, postgres.Options{Now: now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	here := openWith(time.Now)
	// The presenter moved the other server's demo clock an hour ahead.
	warped := openWith(func() time.Time { return time.Now().Add(time.Hour) })
	const lockTimeout = 30 * time.Second
	if res, err := here.Claim(ctx, request("k")); err != nil || !res.Claimed {
		t.Fatalf("claim: %+v %v", res, err)
	}
	if rows, err := warped.StartedBefore(ctx, warped.Now().Add(-lockTimeout)); err != nil || len(rows) != 0 {
		t.Fatalf("a warped clock took another server's fresh key: %+v %v", rows, err)
	}
	// Once the key has really been held for the lock timeout, any
	// server's sweeper may close it.
	if _, err := here.Pool().Exec(ctx, `UPDATE idempotency_keys SET claimed_at = clock_timestamp() - interval '31 seconds'`); err != nil {
		t.Fatal(err)
	}
	if rows, err := warped.StartedBefore(ctx, warped.Now().Add(-lockTimeout)); err != nil || len(rows) != 1 {
		t.Fatalf("a key really held past the lock timeout: %+v %v", rows, err)
	}
}

func TestTheClaimingServerJudgesItsKeysByItsOwnClock(t *testing.T) {
	ownDatabase(t)
	clock := time.Now()
	db := open(t, func() time.Time { return clock })
	if res, err := db.Claim(ctx, request("k")); err != nil || !res.Claimed {
		t.Fatalf("claim: %+v %v", res, err)
	}
	// Its own sweeper knows which of its claims are still running, so the
	// demo clock alone decides for its keys.
	clock = clock.Add(31 * time.Second)
	if rows, err := db.StartedBefore(ctx, clock.Add(-30*time.Second)); err != nil || len(rows) != 1 {
		t.Fatalf("own key after the demo clock moved past the lock timeout: %+v %v", rows, err)
	}
}

// The pool's bound comes from Options, else from the URL's
// pool_max_conns, else the default: an operator fits several servers
// under the database's max_connections through the URL alone.
func TestPoolBound(t *testing.T) {
	ownDatabase(t)
	url := pgtest.NewDatabase(t)
	bounded, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	q := bounded.Query()
	q.Set("pool_max_conns", "3")
	bounded.RawQuery = q.Encode()
	// The letters in another parameter's value are not the parameter.
	lookalike, _ := neturl.Parse(url)
	lookalike.RawQuery = neturl.Values{"application_name": {"pool_max_conns=3"}}.Encode()
	for _, c := range []struct {
		name string
		url  string
		opt  int32
		want int32
	}{
		{"the default without either", url, 0, 16},
		{"the URL's pool_max_conns", bounded.String(), 0, 3},
		{"Options.MaxConns over the URL's", bounded.String(), 5, 5},
		{"the default when only a value reads pool_max_conns", lookalike.String(), 0, 16},
	} {
		t.Run(c.name, func(t *testing.T) {
			db, err := postgres.Open(ctx, c.url, postgres.Options{MaxConns: c.opt})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if got := db.Pool().Config().MaxConns; got != c.want {
				t.Errorf("MaxConns %d, want %d", got, c.want)
			}
		})
	}
}

// A request that step mode holds may work for minutes, longer than the
// lock timeout: the claim records its work deadline, and another server's
// sweeper leaves the key alone until that deadline has passed on the
// database's clock as well as the lock timeout.
func TestAnotherServerSweepsAKeyOnlyAfterItsWorkDeadline(t *testing.T) {
	ownDatabase(t)
	url := pgtest.NewDatabase(t)
	openOne := func() *postgres.DB {
		db, err := postgres.Open(ctx, url, postgres.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	claiming, other := openOne(), openOne()
	held := request("held")
	held.WorkFor = time.Hour
	quick := request("quick")
	quick.WorkFor = time.Millisecond
	for _, r := range []pay.ClaimRequest{held, quick} {
		if res, err := claiming.Claim(ctx, r); err != nil || !res.Claimed {
			t.Fatalf("claim %s: %+v %v", r.Key, res, err)
		}
	}
	// Both keys have really been held past a lock timeout of 30 s.
	if _, err := claiming.Pool().Exec(ctx, `UPDATE idempotency_keys
		SET claimed_at = clock_timestamp() - interval '31 seconds', locked_at = locked_at - interval '31 seconds',
		    created_at = created_at - interval '31 seconds'`); err != nil {
		t.Fatal(err)
	}
	rows, err := other.StartedBefore(ctx, other.Now().Add(-30*time.Second))
	if err != nil || len(rows) != 1 || rows[0].Key != "quick" {
		t.Fatalf("another server's sweep took %+v (%v), want only the key whose work deadline passed", rows, err)
	}
	// Once the held request's deadline has passed too, the key is anyone's.
	if _, err := claiming.Pool().Exec(ctx, `UPDATE idempotency_keys SET work_until = clock_timestamp() - interval '1 millisecond' WHERE key = 'held'`); err != nil {
		t.Fatal(err)
	}
	if rows, err := other.StartedBefore(ctx, other.Now().Add(-30*time.Second)); err != nil || len(rows) != 2 {
		t.Fatalf("after the work deadline: %+v %v", rows, err)
	}
}

// holdKeyRow locks the key's row in a transaction that stays open, as a
// server paused inside its save transaction would, until release.
func holdKeyRow(t *testing.T, db *postgres.DB, key string) (release func()) {
	t.Helper()
	tx, err := db.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `UPDATE idempotency_keys SET locked_at = locked_at WHERE scope = 's' AND key = $1`, key); err != nil {
		t.Fatal(err)
	}
	return func() { _ = tx.Rollback(ctx) }
}

// holdUncommittedKeyRow inserts the key's row in a transaction that stays
// open until release: a claim that has not committed, which another
// claim of the key can only wait for.
func holdUncommittedKeyRow(t *testing.T, db *postgres.DB, key string) (release func()) {
	t.Helper()
	tx, err := db.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO idempotency_keys (scope, key, method, path, fingerprint, order_id, amount_satang,
		status, created_at, locked_at, claim) VALUES ('s', $1, 'POST', '/v1/payments', 'fp', 'A-1', 100, 'started', now(), now(), 'uncommitted')`, key); err != nil {
		t.Fatal(err)
	}
	return func() { _ = tx.Rollback(ctx) }
}

// A claim of a key whose row is committed but locked (its server is
// inside its save transaction) does not wait: the row as committed
// answers it, still at work.
func TestAClaimOfALockedKeyRowIsAnsweredFromTheCommittedRow(t *testing.T) {
	ownDatabase(t)
	dbs := servers(t, 2, postgres.Options{})
	first, err := dbs[0].Claim(ctx, request("held"))
	if err != nil || !first.Claimed {
		t.Fatalf("first claim: %+v %v", first, err)
	}
	release := holdKeyRow(t, dbs[0], "held")
	defer release()
	res, err := dbs[1].Claim(ctx, request("held"))
	if err != nil || res.Claimed || res.Existing.Status != pay.StatusStarted || res.Existing.Claim != first.Claim {
		t.Fatalf("a claim of a locked row: %+v %v, want the started row of the first claim", res, err)
	}
}

func TestAClaimWaitsForAnUncommittedClaimOnlySoLong(t *testing.T) {
	ownDatabase(t)
	dbs := servers(t, 2, postgres.Options{})
	release := holdUncommittedKeyRow(t, dbs[0], "held")
	defer release()

	_, err := dbs[1].Claim(ctx, request("held"))
	if pay.ErrorCode(err) != pay.EUNAVAILABLE {
		t.Fatalf("a claim of a locked row: %v, want EUNAVAILABLE once the lock wait ran out", err)
	}
	// The same connections go on serving other keys.
	if res, err := dbs[1].Claim(ctx, request("other")); err != nil || !res.Claimed {
		t.Fatalf("another key meanwhile: %+v %v", res, err)
	}
}

// A save waits for its key's row however long another transaction holds
// it, past the bound of the store's lock waits: the gateway has charged,
// and the charge must be recorded.
func TestASaveWaitsForAHeldKeyRowPastTheLockWaitBound(t *testing.T) {
	ownDatabase(t)
	dbs := servers(t, 2, postgres.Options{})
	c := request("saved late")
	res, err := dbs[0].Claim(ctx, c)
	if err != nil || !res.Claimed {
		t.Fatalf("claim: %+v %v", res, err)
	}
	release := holdKeyRow(t, dbs[1], c.Key)
	defer release()
	ch := &pay.Charge{ID: "ch_late", Scope: c.Scope, Key: c.Key, OrderID: c.OrderID, AmountSatang: c.AmountSatang, GatewayRef: "gw_late", CreatedAt: time.Now()}
	saved := make(chan error, 1)
	go func() {
		_, err := dbs[0].Complete(ctx, pay.Completion{ClaimRequest: c, Claim: res.Claim, Status: 201, Body: ch.ResponseBody(), Charge: ch})
		saved <- err
	}()
	stillWaiting(t, saved, "the save, while another transaction held the key's row")
	release()
	if err := <-saved; err != nil {
		t.Fatalf("the save, once the row was released: %v", err)
	}
	if k, err := dbs[1].GetKey(ctx, c.Scope, c.Key); err != nil || k.Status != pay.StatusDone || k.ResponseStatus != 201 {
		t.Fatalf("key after the save: %+v %v", k, err)
	}
	if got, err := dbs[1].GetCharge(ctx, c.Scope, ch.ID); err != nil || got.ID != ch.ID {
		t.Fatalf("charge after the save: %+v %v", got, err)
	}
}

// The store's connections bound their lock waits by ClaimLockWait, but a
// server starting while another migrates waits for it as long as it
// takes: here past the bound, until the migration's lock is released.
func TestAServerStartingWaitsForAnotherServersMigrationWithoutABound(t *testing.T) {
	ownDatabase(t)
	url := pgtest.NewDatabase(t)
	first, err := postgres.Open(ctx, url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	tx, err := first.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	const migrationLock int64 = 0x7061797477696365 // postgres.go's
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrationLock); err != nil {
		t.Fatal(err)
	}
	opened := make(chan error, 1)
	go func() {
		db, err := postgres.Open(ctx, url, postgres.Options{})
		if err == nil {
			db.Close()
		}
		opened <- err
	}()
	stillWaiting(t, opened, "the second server's start, while the first held the migration lock")
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-opened; err != nil {
		t.Fatalf("the second server, once the migration lock was released: %v", err)
	}
}

func TestAClaimWhoseConnectionIsTerminatedIsUnavailable(t *testing.T) {
	ownDatabase(t)
	dbs := servers(t, 2, postgres.Options{})
	release := holdUncommittedKeyRow(t, dbs[0], "ended")
	defer release()
	done := make(chan error, 1)
	go func() { _, err := dbs[1].Claim(ctx, request("ended")); done <- err }()
	// Terminate the claim's backend while it waits for the row.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		err := dbs[0].Pool().QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%INSERT INTO idempotency_keys%'`).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("the claim ended before it could be terminated: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the claim never waited for the row")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := <-done; pay.ErrorCode(err) != pay.EUNAVAILABLE {
		t.Fatalf("a claim on a terminated connection: %v, want EUNAVAILABLE", err)
	}
}

// A renewal sets a paused work's deadline a lease from now on the
// database's clock, never earlier than it was: another server's sweeper
// leaves the key that long, and no longer once the renewals stop.
func TestARenewalSetsTheWorkDeadlineALeaseFromNow(t *testing.T) {
	ownDatabase(t)
	db := servers(t, 1, postgres.Options{})[0]
	long, short := request("long"), request("short")
	long.WorkFor, short.WorkFor = time.Hour, time.Millisecond
	claims := map[string]string{}
	for _, r := range []pay.ClaimRequest{long, short} {
		res, err := db.Claim(ctx, r)
		if err != nil || !res.Claimed {
			t.Fatalf("claim %s: %+v %v", r.Key, res, err)
		}
		claims[r.Key] = res.Claim
	}
	const lease = 30 * time.Second
	// The database's clock just before and just after the renewals bound
	// where "a lease from now" can fall, with no allowance for how long
	// the renewals took.
	dbNow := func() time.Time {
		var now time.Time
		if err := db.Pool().QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now); err != nil {
			t.Fatal(err)
		}
		return now
	}
	before := dbNow()
	for key, claim := range claims {
		if err := db.RenewWork(ctx, "s", key, claim, lease); err != nil {
			t.Fatal(err)
		}
	}
	after := dbNow()
	workUntil := func(key string) time.Time {
		var until time.Time
		if err := db.Pool().QueryRow(ctx, `SELECT work_until FROM idempotency_keys WHERE key = $1`, key).Scan(&until); err != nil {
			t.Fatal(err)
		}
		return until
	}
	if until := workUntil("short"); until.Before(before.Add(lease)) || until.After(after.Add(lease)) {
		t.Fatalf("the renewed deadline is %v, want a lease of %v after a moment between %v and %v", until, lease, before, after)
	}
	ahead := func(key string) time.Duration { return workUntil(key).Sub(after) }
	if d := ahead("long"); d <= lease {
		t.Fatalf("a renewal brought a later deadline back to %v ahead", d)
	}
}

// A newer server may change a column's type while this one runs (a
// migration): the statements this one prepared before then are refused
// once on each connection. A claim refused so recorded nothing, and its
// request is told to retry, not that the server failed; the retry is
// answered.
func TestAClaimWhoseStatementsTablesChangedIsUnavailable(t *testing.T) {
	ownDatabase(t)
	url := pgtest.NewDatabase(t)
	if strings.Contains(url, "?") {
		url += "&pool_max_conns=1"
	} else {
		url += "?pool_max_conns=1"
	}
	db, err := postgres.Open(ctx, url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Claim(ctx, request("migrated")); err != nil {
		t.Fatal(err)
	}
	if res, err := db.Claim(ctx, request("migrated")); err != nil || res.Claimed {
		t.Fatalf("a repeat before the change: %+v, %v", res, err)
	}
	if _, err := db.Pool().Exec(ctx, `ALTER TABLE idempotency_keys ALTER COLUMN method TYPE varchar(16)`); err != nil {
		t.Fatal(err)
	}
	var unavailable int
	for range 3 {
		res, err := db.Claim(ctx, request("migrated"))
		switch {
		case pay.ErrorCode(err) == pay.EUNAVAILABLE:
			unavailable++
			continue
		case err != nil:
			t.Fatalf("a repeat after the change: %v, want EUNAVAILABLE or its answer", err)
		case res.Claimed || res.Existing.Claim == "":
			t.Fatalf("a repeat after the change: %+v, want the held row", res)
		}
		return
	}
	t.Fatalf("three repeats after the change, %d of them unavailable, none answered", unavailable)
}

// A reset waits for a transaction under way on the tables past the bound
// the pool sets on every other lock wait, up to ResetLockWait; then it
// says the tables were not emptied, and a reset once the transaction
// ended empties them.
func TestAResetWaitsForATransactionUnderWayUpToItsOwnBound(t *testing.T) {
	ownDatabase(t)
	// The transaction stands for a live server's, which never sits idle:
	// the bound on idle transactions (shorter than the reset's) must not
	// end it first.
	dbs := servers(t, 2, postgres.Options{IdleInTransaction: 2 * postgres.ResetLockWait})
	release := holdUncommittedKeyRow(t, dbs[0], "slow")
	defer release()
	reset := make(chan error, 1)
	start := time.Now()
	go func() { reset <- dbs[1].Reset(ctx) }()
	stillWaiting(t, reset, "the reset, while a transaction held a key row")
	err := <-reset
	if pay.ErrorCode(err) != pay.EUNAVAILABLE || !strings.Contains(pay.ErrorMessage(err), "try the reset again") {
		t.Fatalf("a reset held past its bound: %v (code %q)", err, pay.ErrorCode(err))
	}
	if waited := time.Since(start); waited < postgres.ResetLockWait {
		t.Fatalf("the reset gave up after %s, before its bound of %s", waited, postgres.ResetLockWait)
	}
	release()
	if err := dbs[1].Reset(ctx); err != nil {
		t.Fatalf("the reset, once the transaction ended: %v", err)
	}
	var n int
	if err := dbs[1].Pool().QueryRow(ctx, `SELECT count(*) FROM idempotency_keys`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d key rows after the reset (%v)", n, err)
	}
}

// stillWaiting fails the test if done delivers within a second past
// ClaimLockWait, the bound the pool sets on every lock wait: what
// sends on done was to wait longer than that.
func stillWaiting(t *testing.T, done <-chan error, what string) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("%s ended within the pool's lock-wait bound: %v", what, err)
	case <-time.After(postgres.ClaimLockWait + time.Second):
	}
}

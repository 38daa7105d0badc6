package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"

	"paytwice/pay"
	"paytwice/web/live"
	"paytwice/web/room"
)

// measuredOutcomes is what the lab reported before it kept running
// counts: the charge tables grouped by LabMeasure, counted the same way.
func measuredOutcomes(t *testing.T, env *testEnv) LabOutcomes {
	t.Helper()
	g, err := env.DB.LabMeasure(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	count := func(groups []pay.LabGroup, name func(pay.LabGroup) string) LabChargeOutcome {
		o := LabChargeOutcome{Twice: []string{}}
		for _, lg := range groups {
			o.Charges += lg.Charges
			if lg.Charges > 1 {
				o.ChargedTwice++
				o.ExtraCharges += lg.Charges - 1
				o.Twice = append(o.Twice, name(lg))
			}
		}
		return o
	}
	byOrder := func(lg pay.LabGroup) string { return lg.OrderID }
	byKey := func(lg pay.LabGroup) string {
		return pay.Truncate(strings.TrimPrefix(lg.Key, memoryLockPrefix), 40) + " (" + lg.OrderID + ")"
	}
	var checkFirst, memoryLock, retry, after500 []pay.LabGroup
	for _, lg := range g.Loose {
		if strings.HasPrefix(lg.Key, memoryLockPrefix) {
			memoryLock = append(memoryLock, lg)
		} else {
			checkFirst = append(checkFirst, lg)
		}
	}
	for _, lg := range g.ManyKeys {
		if lg.Saved500 {
			after500 = append(after500, lg)
		} else {
			retry = append(retry, lg)
		}
	}
	var o LabOutcomes
	o.NoKey = count(g.NoKey, byOrder)
	o.PruneTooSoon.ChargeOutcome = count(g.KeyOnly, byOrder)
	o.CheckThenInsert.ChargeOutcome = count(checkFirst, byKey)
	o.CheckThenInsert.KeyRows = g.LooseKeyRows
	o.MemoryLock.ChargeOutcome = count(memoryLock, byKey)
	o.NewKeyPerRetry = count(retry, byOrder)
	o.NewKeyAfter500.ChargeOutcome = count(after500, byOrder)
	return o
}

// sameCounts fails unless the running counts say what a fresh
// measurement of the tables says (lists compared as sets: charges made in
// the same millisecond have no oldest).
func sameCounts(t *testing.T, when string, got, want LabOutcomes) {
	t.Helper()
	pairs := []struct {
		name      string
		got, want LabChargeOutcome
	}{
		{"no key", got.NoKey, want.NoKey},
		{"new key per retry", got.NewKeyPerRetry, want.NewKeyPerRetry},
		{"check then insert", got.CheckThenInsert.ChargeOutcome, want.CheckThenInsert.ChargeOutcome},
		{"new key after a 500", got.NewKeyAfter500.ChargeOutcome, want.NewKeyAfter500.ChargeOutcome},
		{"prune too soon", got.PruneTooSoon.ChargeOutcome, want.PruneTooSoon.ChargeOutcome},
		{"memory lock", got.MemoryLock.ChargeOutcome, want.MemoryLock.ChargeOutcome},
	}
	for _, p := range pairs {
		g, w := p.got, p.want
		g.Twice, w.Twice = slices.Sorted(slices.Values(g.Twice)), slices.Sorted(slices.Values(w.Twice))
		if g.Charges != w.Charges || g.ChargedTwice != w.ChargedTwice || g.ExtraCharges != w.ExtraCharges || !slices.Equal(g.Twice, w.Twice) {
			t.Errorf("%s, %s: counted %+v, the tables say %+v", when, p.name, g, w)
		}
	}
	if got.CheckThenInsert.KeyRows != want.CheckThenInsert.KeyRows {
		t.Errorf("%s: counted %d loose key rows, the tables hold %d", when, got.CheckThenInsert.KeyRows, want.CheckThenInsert.KeyRows)
	}
}

// TestLabCountsFollowPayments: the lab's running counts, updated as
// charges are written, agree with a fresh measurement of the tables after
// a mixed run of every mode that charges, a prune and a reset, and they
// are not read again from the tables for payments this server made.
func TestLabCountsFollowPayments(t *testing.T) {
	waitsOnRealClocks(t)
	env := newTestEnv(t, Config{})
	check := func(when string) LabOutcomes {
		t.Helper()
		o := env.outcomes()
		sameCounts(t, when, o, measuredOutcomes(t, env))
		return o
	}
	payFor := func(key, order string) response {
		t.Helper()
		return env.pay(key, `{"order_id":"`+order+`","amount_satang":129900}`)
	}
	check("at start-up")
	builds := env.Server.lab.tally.builds.Load()

	// The real protocol: an order paid under two keys, and an order
	// charged again under a new key after a 500 saved with its charge.
	payFor(uuid.NewString(), "R-1")
	payFor(uuid.NewString(), "R-1")
	setFaults(t, env, pay.ServerFaults{ServerError: true})
	if r := payFor(uuid.NewString(), "F-1"); r.Status != http.StatusInternalServerError {
		t.Fatalf("with server_error: %d %s", r.Status, r.Body)
	}
	setFaults(t, env, pay.ServerFaults{})
	payFor(uuid.NewString(), "F-1")
	payFor(uuid.NewString(), "ONCE-1")
	o := check("after the real protocol's payments")
	if o.NewKeyPerRetry.ChargedTwice != 1 || o.NewKeyAfter500.ChargedTwice != 1 {
		t.Fatalf("counted %+v and %+v, want R-1 and F-1", o.NewKeyPerRetry, o.NewKeyAfter500)
	}

	// No key: two clicks at once, and one alone.
	env.putLab(room.LabSettings{Server: room.LabServer{Mode: room.LabNoKey}})
	setFaults(t, env, pay.ServerFaults{DelayMS: 200})
	env.burst(2, uuid.NewString(), `{"order_id":"N-1","amount_satang":129900}`)
	setFaults(t, env, pay.ServerFaults{})
	payFor(uuid.NewString(), "N-2")

	// Check first, then insert, with and without constraints; the lock in
	// memory.
	for _, mode := range []room.LabMode{room.LabCheckThenInsert, room.LabCheckThenInsertConstrained, room.LabMemoryLock} {
		env.putLab(room.LabSettings{Server: room.LabServer{Mode: mode, CheckGapMS: 150}})
		env.burst(4, uuid.NewString(), `{"order_id":"C-`+string(mode)+`","amount_satang":129900}`)
		payFor(uuid.NewString(), "C-alone")
	}
	o = check("after the unguarded modes")
	if o.NoKey.ChargedTwice != 1 || o.CheckThenInsert.ChargedTwice != 1 || o.MemoryLock.Charges != 2 {
		t.Fatalf("counted %+v", o)
	}
	if n := env.Server.lab.tally.builds.Load(); n != builds {
		t.Fatalf("the tables were read %d more times for this server's own payments, want none", n-builds)
	}

	// The key table as the only memory, a prune, and the late retry.
	env.putLab(room.LabSettings{Server: room.LabServer{Mode: room.LabKeyTableOnly, RetentionSeconds: 60}})
	late := uuid.NewString()
	payFor(late, "K-1")
	check("before the prune")
	env.send(http.MethodPost, "/api/clock/advance", map[string]int{"seconds": 120})
	if r := env.send(http.MethodPost, "/api/lab/prune", nil); r.Status != http.StatusOK {
		t.Fatalf("prune: %d %s", r.Status, r.Body)
	}
	payFor(late, "K-1")
	if o := check("after the prune and the late retry"); o.PruneTooSoon.ChargedTwice != 1 {
		t.Fatalf("counted %+v, want K-1 charged again", o.PruneTooSoon)
	}

	// A reset empties the tables and the counts.
	if r := env.send(http.MethodPost, "/api/reset", nil); r.Status != http.StatusOK && r.Status != http.StatusNoContent {
		t.Fatalf("reset: %d %s", r.Status, r.Body)
	}
	if o := check("after the reset"); o.ExtraCharges != 0 || o.NoKey.Charges != 0 || o.CheckThenInsert.KeyRows != 0 {
		t.Fatalf("after the reset: %+v", o)
	}
	env.putLab(room.LabSettings{Server: room.LabServer{Mode: room.LabNoKey}})
	payFor(uuid.NewString(), "N-9")
	payFor(uuid.NewString(), "N-9")
	if o := check("after the reset and two more payments"); o.NoKey.ChargedTwice != 1 {
		t.Fatalf("counted %+v", o.NoKey)
	}

	// Counted from the tables again, the numbers are the same.
	before := env.outcomes()
	env.Server.lab.tablesChanged()
	sameCounts(t, "rebuilt from the tables", env.outcomes(), before)
}

// TestLabCountsFollowOtherServers: two servers on one PostgreSQL
// database. Once both have counted the tables, the charges one server
// makes reach the other's counts through the relay.
func TestLabCountsFollowOtherServers(t *testing.T) {
	waitsOnRealClocks(t)
	envs, _ := classServers(t, "s1", "s2")
	here, there := envs[0], envs[1]
	for _, e := range envs {
		if o := e.outcomes(); o.NoKey.Charges != 0 || o.ExtraCharges != 0 {
			t.Fatalf("%s counted %+v before any payment", e.Server.cfg.Name, o)
		}
	}
	there.putLab(room.LabSettings{Server: room.LabServer{Mode: room.LabNoKey}})
	waitUntil(t, "the mode on s1", func() bool { return here.Server.lab.Settings().Server.Mode == room.LabNoKey })
	for range 2 {
		if r := there.pay(uuid.NewString(), `{"order_id":"N-2","amount_satang":129900}`); r.Status != http.StatusCreated {
			t.Fatalf("payment on s2: %d %s", r.Status, r.Body)
		}
	}
	if o := there.outcomes().NoKey; o.Charges != 2 || o.ChargedTwice != 1 {
		t.Fatalf("s2 counted its own payments as %+v", o)
	}
	waitUntil(t, "s1 counting s2's charges", func() bool { return here.outcomes().NoKey.Charges == 2 })
	if o := here.outcomes().NoKey; o.ChargedTwice != 1 || !slices.Equal(o.Twice, []string{"N-2"}) {
		t.Fatalf("s1 counted s2's payments as %+v", o)
	}
}

// TestPersonalDataScanFollowsOtherServers: the scan for keys made of
// personal data reads three tables whole, so another server's payments
// make it run again only while such keys are in play. Before one is,
// they leave it cached; once another server has stored one, this
// server's lab finds it, and goes on scanning after each of the other's
// payments.
func TestPersonalDataScanFollowsOtherServers(t *testing.T) {
	waitsOnRealClocks(t)
	envs, _ := classServers(t, "s1", "s2")
	here, there := envs[0], envs[1]
	l := here.Server.lab
	heard := func(key string) {
		t.Helper()
		waitUntil(t, "s1 hearing s2's charge for "+key, func() bool {
			for _, e := range here.Server.Hub().Recent(200) {
				if e.Kind == live.Charged && e.Key == key {
					return true
				}
			}
			return false
		})
	}
	if o := here.outcomes().PersonalDataKey; o.Stored[pay.WhereKeyTable] != 0 {
		t.Fatalf("s1 found %+v before any payment", o)
	}
	before := l.personal.tablesGen.Load()
	for i := range 3 {
		key := uuid.NewString()
		if r := there.pay(key, fmt.Sprintf(`{"order_id":"P-%d","amount_satang":100}`, i)); r.Status != http.StatusCreated {
			t.Fatalf("payment on s2: %d %s", r.Status, r.Body)
		}
		heard(key)
	}
	if after := l.personal.tablesGen.Load(); after != before {
		t.Fatalf("s2's payments with plain keys made s1 scan for personal data again (tables version %d → %d)", before, after)
	}

	const email = "malee.k@example.com"
	if r := there.pay(email, `{"order_id":"P-9","amount_satang":100}`); r.Status != http.StatusCreated {
		t.Fatalf("payment on s2: %d %s", r.Status, r.Body)
	}
	heard(email)
	if o := here.outcomes().PersonalDataKey; o.Stored[pay.WhereKeyTable] != 1 || o.Stored[pay.WhereCharges] != 1 ||
		o.Stored[pay.WhereGateway] != 1 {
		t.Fatalf("s1 found %+v after s2 stored %s", o, email)
	}
	inPlay := l.personal.tablesGen.Load()
	key := uuid.NewString()
	if r := there.pay(key, `{"order_id":"P-10","amount_satang":100}`); r.Status != http.StatusCreated {
		t.Fatalf("payment on s2: %d %s", r.Status, r.Body)
	}
	heard(key)
	if l.personal.tablesGen.Load() == inPlay {
		t.Fatal("with a key of personal data stored, s2's next payment left s1's scan as it was")
	}
}

// rowsStore serves LabRows from a list, calling during halfway through.
type rowsStore struct {
	pay.Store
	rows   *[]pay.LabRow
	during func()
}

func (s rowsStore) LabRows(_ context.Context, fn func(pay.LabRow)) error {
	for i, r := range *s.rows {
		if i == len(*s.rows)/2 && s.during != nil {
			s.during()
		}
		fn(r)
	}
	return nil
}

// TestLabTallyWritesDuringRebuild: writes that end while the counts are
// rebuilt are counted once whether or not the rebuild read their row; a
// rebuild invalidated halfway still answers, and the next question
// rebuilds; a write that straddles an invalidation asks for a rebuild.
func TestLabTallyWritesDuringRebuild(t *testing.T) {
	t.Parallel()
	row := func(id, order string) pay.LabRow {
		return pay.LabRow{Table: pay.LabCharges, ID: id, Key: pay.LabKeyPrefix + "no-key " + id, OrderID: order}
	}
	charges := func(tl *labTally, db pay.Store) int {
		t.Helper()
		var n int
		if err := tl.read(context.Background(), db, func(c *labCounts) { n = c.outcomes().NoKey.Charges }); err != nil {
			t.Fatal(err)
		}
		return n
	}
	rows := []pay.LabRow{row("1", "A"), row("2", "A"), row("3", "B"), row("4", "C")}

	tl := newLabTally()
	written := rows[:3]
	db := rowsStore{rows: &written}
	// Two writes end during the rebuild: one whose row the rebuild reads
	// (it committed before), one whose row it does not.
	readLater := tl.begin()
	notRead := tl.begin()
	db.during = func() {
		tl.end(readLater, rows[2])
		tl.end(notRead, rows[3])
	}
	if n := charges(tl, db); n != 4 {
		t.Fatalf("after a rebuild with writes during it: %d charges, want 4", n)
	}
	if n := tl.builds.Load(); n != 1 {
		t.Fatalf("%d rebuilds, want 1", n)
	}

	// Invalidated halfway: the question is answered, the next rebuilds.
	db.during = tl.invalidate
	written = rows
	if tl.invalidate(); charges(tl, db) != 4 || tl.builds.Load() != 2 {
		t.Fatalf("an invalidated rebuild did not answer its question (%d rebuilds)", tl.builds.Load())
	}
	db.during = nil
	if n := charges(tl, db); n != 4 || tl.builds.Load() != 3 {
		t.Fatalf("after an invalidated rebuild: %d charges, %d rebuilds, want 4 and 3", n, tl.builds.Load())
	}

	// A write begun before an invalidation and ended after the rebuild
	// cannot be placed: the next question rebuilds.
	straddling := tl.begin()
	tl.invalidate()
	charges(tl, db)
	tl.end(straddling, row("5", "D"))
	written = append(rows, row("5", "D"))
	if n := charges(tl, db); n != 5 || tl.builds.Load() != 5 {
		t.Fatalf("after a straddling write: %d charges, %d rebuilds, want 5 and 5", n, tl.builds.Load())
	}
}

// TestLabTallyKeepsNewestOrders: the real protocol's orders charged once
// are kept only within the window, however many are paid, and orders
// charged again after falling out of it are read back from the store:
// the counts still say what the tables say, without rebuilding them.
func TestLabTallyKeepsNewestOrders(t *testing.T) {
	waitsOnRealClocks(t)
	const window = 8
	env, tl, payFor := tallyWithWindow(t, window)
	kept := func(when string) {
		t.Helper()
		var singles, ring int
		if err := tl.read(context.Background(), env.DB, func(c *labCounts) {
			singles, ring = len(c.singles), len(c.window)
		}); err != nil {
			t.Fatal(err)
		}
		if singles > window || ring > window {
			t.Fatalf("%s: %d orders charged once kept (%d in the window), want at most %d", when, singles, ring, window)
		}
	}
	sameCounts(t, "at start-up", env.outcomes(), measuredOutcomes(t, env))
	builds := tl.builds.Load()

	payFor("OLD-1")
	setFaults(t, env, pay.ServerFaults{ServerError: true})
	if r := env.pay(uuid.NewString(), `{"order_id":"OLD-500","amount_satang":100}`); r.Status != http.StatusInternalServerError {
		t.Fatalf("with server_error: %d %s", r.Status, r.Body)
	}
	setFaults(t, env, pay.ServerFaults{})
	const paid = 6 * window
	for i := range paid {
		payFor(fmt.Sprintf("ONCE-%d", i))
	}
	kept(fmt.Sprintf("after %d orders", paid))
	// Charged again long after: OLD-1 and OLD-500 dropped from the window
	// long ago, ONCE-10 too, the newest still in it.
	payFor("OLD-1")
	payFor("OLD-500")
	payFor("ONCE-10")
	payFor(fmt.Sprintf("ONCE-%d", paid-1))
	payFor("OLD-1")
	o := env.outcomes()
	sameCounts(t, "after old orders charged again", o, measuredOutcomes(t, env))
	if o.NewKeyPerRetry.ChargedTwice != 3 || o.NewKeyPerRetry.ExtraCharges != 4 || o.NewKeyAfter500.ChargedTwice != 1 {
		t.Fatalf("counted %+v and %+v, want OLD-1 (3 charges), ONCE-10, ONCE-%d, and OLD-500", o.NewKeyPerRetry, o.NewKeyAfter500, paid-1)
	}
	kept("after old orders charged again")
	if n := tl.builds.Load(); n != builds {
		t.Fatalf("the tables were read %d more times, want none: dropped orders are read back one at a time", n-builds)
	}

	// Rebuilt from the tables, the counts keep the newest orders only,
	// and still place an order dropped then.
	env.Server.lab.tablesChanged()
	sameCounts(t, "rebuilt", env.outcomes(), o)
	kept("rebuilt")
	payFor("ONCE-3")
	sameCounts(t, "after a dropped order charged again", env.outcomes(), measuredOutcomes(t, env))
	kept("after a dropped order charged again")
}

// TestLabTallyResetForgetsDroppedOrders: a reset empties the charge
// tables, and the counts forget together with them the orders they had
// dropped from their window: the next order paid, one they dropped
// before the reset, is counted as charged once, and no new payment reads
// its order back for an order the tables no longer hold.
func TestLabTallyResetForgetsDroppedOrders(t *testing.T) {
	waitsOnRealClocks(t)
	const window = 8
	env, tl, payFor := tallyWithWindow(t, window)
	// dropped says whether the counts hold any dropped order, and how
	// many orders charged once they keep.
	dropped := func() (any bool, singles int) {
		t.Helper()
		if err := tl.read(context.Background(), env.DB, func(c *labCounts) {
			any, singles = c.dropped.any(), len(c.singles)
		}); err != nil {
			t.Fatal(err)
		}
		return any, singles
	}
	for i := range 3 * window {
		payFor(fmt.Sprintf("ONCE-%d", i))
	}
	if any, _ := dropped(); !any {
		t.Fatalf("after %d orders with a window of %d, no order was dropped", 3*window, window)
	}
	env.must(http.MethodPost, "/api/reset", "")
	if any, singles := dropped(); any || singles != 0 {
		t.Fatalf("after the reset: dropped orders held %t, %d orders charged once kept; want none of either", any, singles)
	}
	payFor("ONCE-0")
	o := env.outcomes()
	sameCounts(t, "after the reset", o, measuredOutcomes(t, env))
	if o.NewKeyPerRetry.ChargedTwice != 0 {
		t.Fatalf("after the reset ONCE-0 counted as charged more than once: %+v", o.NewKeyPerRetry)
	}
	if any, singles := dropped(); any || singles != 1 {
		t.Fatalf("after one order paid past the reset: dropped orders held %t, %d orders charged once kept; want none and 1", any, singles)
	}
}

// tallyWithWindow is a server whose lab tally keeps only window orders
// charged once, and a payment of one new order on it.
func tallyWithWindow(t *testing.T, window int) (*testEnv, *labTally, func(order string)) {
	t.Helper()
	env := newTestEnv(t, Config{})
	tl := env.Server.lab.tally
	tl.mu.Lock()
	tl.window = window
	tl.mu.Unlock()
	env.Server.lab.tablesChanged()
	return env, tl, func(order string) {
		t.Helper()
		if r := env.pay(uuid.NewString(), `{"order_id":"`+order+`","amount_satang":100}`); r.Status != http.StatusCreated {
			t.Fatalf("paying %s: %d %s", order, r.Status, r.Body)
		}
	}
}

// roomUnwritable is a server's peers whose room cannot be written while
// failing is set: a reset empties the tables and then fails to change the
// room.
type roomUnwritable struct {
	room.Peers
	failing *atomic.Bool
}

func (p roomUnwritable) UpdateRoom(ctx context.Context, change func([]byte) ([]byte, error)) ([]byte, int64, error) {
	if p.failing.Load() {
		return nil, 0, errors.New("the room's row is away")
	}
	return p.Peers.UpdateRoom(ctx, change)
}

// TestLabCountsFollowAResetWhoseRoomFails: a reset empties the charge
// tables, then cannot write the room (its peers fail): the reset is
// refused, but the tables are empty all the same, and the lab's counts
// say so at the next question instead of the order charged twice before.
func TestLabCountsFollowAResetWhoseRoomFails(t *testing.T) {
	waitsOnRealClocks(t)
	var failing atomic.Bool
	env := newTestEnv(t, Config{Peers: roomUnwritable{Peers: room.Memory(), failing: &failing}})
	for range 2 {
		if r := env.pay(uuid.NewString(), `{"order_id":"R-1","amount_satang":129900}`); r.Status != http.StatusCreated {
			t.Fatalf("paying R-1: %d %s", r.Status, r.Body)
		}
	}
	if o := env.outcomes(); o.NewKeyPerRetry.ChargedTwice != 1 {
		t.Fatalf("before the reset: %+v, want R-1 charged twice", o.NewKeyPerRetry)
	}
	failing.Store(true)
	if r := env.send(http.MethodPost, "/api/reset", nil); r.Status < 500 {
		t.Fatalf("a reset whose room cannot be written: %d %s, want it refused", r.Status, r.Body)
	}
	failing.Store(false)
	o := env.outcomes()
	sameCounts(t, "after the failed reset", o, measuredOutcomes(t, env))
	if o.NewKeyPerRetry.ChargedTwice != 0 || o.NewKeyPerRetry.Charges != 0 {
		t.Fatalf("after the failed reset emptied the tables the lab still counts %+v", o.NewKeyPerRetry)
	}
}

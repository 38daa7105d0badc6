// Package storetest is the contract every storage backend of the payment
// protocol must pass. A backend's own test calls Run with a constructor
// that opens a fresh, empty store:
//
//	func TestContract(t *testing.T) {
//		storetest.Run(t, func(t *testing.T, now func() time.Time) storetest.Backend {
//			return openMyBackend(t, now)
//		})
//	}
//
// The tests use real goroutines against the real backend; none waits on
// a timer. The clock is the one the constructor is given.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"paytwice/pay"
)

// Backend is the whole contract a backend serves: pay.Store, the
// protocol's storage, the reads of the pages and the API, and the lab's.
type Backend = pay.Store

// Open opens a fresh, empty backend whose clock is now; the backend is
// closed when the test ends.
type Open func(t *testing.T, now func() time.Time) Backend

// Run runs the whole contract.
func Run(t *testing.T, open Open) {
	for _, c := range []struct {
		name string
		test func(*testing.T, Open)
	}{
		{"of many concurrent claims on one key, exactly one wins", claimRace},
		{"a key can hold one charge only", oneChargePerKey},
		{"a completion that fails before commit undoes only its own writes", failBeforeCommit},
		{"prune removes done keys older than the cutoff and never a started one", prune},
		{"a done key's answer is replayed from the cache as it is on disk", cacheAgreesWithDisk},
		{"release and complete act only on the claim they name", staleTokens},
		{"a completion whose claim was released records the charge and writes the key again", lateCompletion},
		{"a completion whose key another claim holds records the charge and leaves that claim its key", lateCompletionReclaimed},
		{"a pruned key's charge still binds it to its order", keyPaysForOneOrder},
		{"started keys are listed for the sweeper by age", startedBefore},
		{"a paused work's lease is renewed only for the claim that holds the key", renewWork},
		{"the reads show what was saved, and reset empties it all", readsAndReset},
		{"an order's record holds its charges, its keys and its released claims", orderRecord},
		{"the lab's unguarded writes fail, or not, as a naive application's would", labWrites},
		{"the lab measures its charges by order and by key, and finds keys where they are kept", labMeasure},
		{"each server's answer counts are kept apart, for the room's current reset only", answerCounts},
		{"each workshop student's gateway keeps one charge per key, apart from the others'", workshopCharges},
		{"each workshop student's books stay within their bound, counting what they pruned", workshopChargesPruned},
		{"a removed workshop student's books keep no charge, however it raced the removal", workshopStudentRemoved},
		{"a removed workshop student is remembered a day after their last removal, then forgotten at the next", workshopRemovedForgotten},
	} {
		// Each case opens a backend of its own, so the cases run side by
		// side: a database backend's time goes mostly in making and
		// dropping its databases.
		t.Run(c.name, func(t *testing.T) { t.Parallel(); c.test(t, open) })
	}
}

var ctx = context.Background()

func request(key string) pay.ClaimRequest {
	return pay.ClaimRequest{Scope: "s", Key: key, Method: "POST", Path: "/v1/payments", Fingerprint: "fp", OrderID: "A-1", AmountSatang: 100}
}

func charge(now time.Time) *pay.Charge {
	return &pay.Charge{ID: pay.NewID("ch_"), OrderID: "A-1", AmountSatang: 100, GatewayRef: "gw", CreatedAt: now}
}

func claim(t *testing.T, db Backend, key string) string {
	t.Helper()
	res, err := db.Claim(ctx, request(key))
	if err != nil || !res.Claimed || res.Claim == "" {
		t.Fatalf("claim %s: %+v %v", key, res, err)
	}
	return res.Claim
}

func complete(t *testing.T, db Backend, key, token string, now time.Time) pay.Completed {
	t.Helper()
	ch := charge(now)
	done, err := db.Complete(ctx, pay.Completion{ClaimRequest: request(key), Claim: token, Status: 201, Body: ch.ResponseBody(), Charge: ch})
	if err != nil {
		t.Fatalf("complete %s: %v", key, err)
	}
	return done
}

func charges(t *testing.T, db Backend) int {
	t.Helper()
	n, err := db.CountCharges(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func claimRace(t *testing.T, open Open) {
	db := open(t, time.Now)
	const n = 50
	var wg sync.WaitGroup
	wins := make(chan string, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := db.Claim(ctx, request("k"))
			switch {
			case err != nil:
				t.Error(err)
			case res.Claimed:
				wins <- res.Claim
			case res.Existing.Status != pay.StatusStarted || res.Existing.Fingerprint != "fp":
				t.Errorf("a loser saw %+v", res.Existing)
			}
		}()
	}
	wg.Wait()
	close(wins)
	if len(wins) != 1 {
		t.Fatalf("%d claims won, want 1", len(wins))
	}
	if k, err := db.GetKey(ctx, "s", "k"); err != nil || k.Claim != <-wins {
		t.Fatalf("the key row does not carry the winner's token: %+v %v", k, err)
	}
}

func oneChargePerKey(t *testing.T, open Open) {
	db := open(t, time.Now)
	complete(t, db, "k", claim(t, db, "k"), time.Now())
	// Even bypassing the key protocol, a second charge with another
	// gateway reference cannot be recorded for the same key.
	other := &pay.Charge{ID: "ch_2", OrderID: "A-1", AmountSatang: 100, GatewayRef: "gw-other", CreatedAt: time.Now()}
	if _, err := db.Complete(ctx, pay.Completion{ClaimRequest: request("k"), Status: 201, Charge: other}); err == nil {
		t.Fatal("a second charge for a done key was accepted")
	}
	if n := charges(t, db); n != 1 {
		t.Fatalf("%d charges, want 1", n)
	}
}

func failBeforeCommit(t *testing.T, open Open) {
	db := open(t, time.Now)
	halfway := errors.New("halfway")
	var wg sync.WaitGroup
	for i := range 20 {
		key := fmt.Sprint("k", i)
		token := claim(t, db, key)
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := pay.Completion{ClaimRequest: request(key), Claim: token, Status: 201, Body: []byte("{}"), Charge: charge(time.Now())}
			if i%2 == 0 {
				c.BeforeCommit = func() error { return halfway }
			}
			_, err := db.Complete(ctx, c)
			if (i%2 == 0) != errors.Is(err, halfway) {
				t.Errorf("key %s: %v", key, err)
			}
		}()
	}
	wg.Wait()
	started, done, _ := db.KeyCounts(ctx)
	if n := charges(t, db); started != 10 || done != 10 || n != 10 {
		t.Fatalf("started %d done %d charges %d, want 10/10/10", started, done, n)
	}
}

func prune(t *testing.T, open Open) {
	clock := newClock()
	db := open(t, clock.Now)
	oldDone := claim(t, db, "old-done")
	claim(t, db, "old-started")
	complete(t, db, "old-done", oldDone, clock.Now())
	clock.Advance(25 * time.Hour)
	complete(t, db, "new-done", claim(t, db, "new-done"), clock.Now())
	pruned, err := db.Prune(ctx, clock.Now().Add(-24*time.Hour))
	if err != nil || pruned.Keys != 1 || pruned.First.Key != "old-done" {
		t.Fatalf("pruned %v %v, want only old-done", pruned, err)
	}
	for key, want := range map[string]string{"old-started": pay.StatusStarted, "new-done": pay.StatusDone} {
		if k, err := db.GetKey(ctx, "s", key); err != nil || k.Status != want {
			t.Errorf("%s: %+v %v, want %s", key, k, err, want)
		}
	}
	if _, err := db.GetKey(ctx, "s", "old-done"); pay.ErrorCode(err) != pay.ENOTFOUND {
		t.Errorf("old-done still there: %v", err)
	}
	if _, ok := db.CachedResponse("s", "old-done"); ok {
		t.Error("a pruned key is still in the replay cache")
	}
	// A pruned key is a new request for the same order: it may be claimed.
	if res, err := db.Claim(ctx, request("old-done")); err != nil || !res.Claimed {
		t.Fatalf("reclaiming a pruned key: %+v %v", res, err)
	}
}

func cacheAgreesWithDisk(t *testing.T, open Open) {
	db := open(t, time.Now)
	done := complete(t, db, "k", claim(t, db, "k"), time.Now())
	k, err := db.GetKey(ctx, "s", "k")
	if err != nil || k.Status != pay.StatusDone || string(k.ResponseBody) != string(done.Body) || k.ResponseStatus != 201 {
		t.Fatalf("key on disk %+v %v, completion %+v", k, err, done)
	}
	if r, ok := db.CachedResponse("s", "k"); ok && (string(r.Body) != string(k.ResponseBody) || r.Status != k.ResponseStatus) {
		t.Fatalf("the cache holds %+v, the disk %+v", r, k)
	}
}

func staleTokens(t *testing.T, open Open) {
	db := open(t, time.Now)
	token := claim(t, db, "k")
	if released, err := db.Release(ctx, "s", "k", "not-"+token, pay.ReleasedBeforeWork); err != nil || released {
		t.Fatalf("release with a stale token: %v %v", released, err)
	}
	if k, err := db.GetKey(ctx, "s", "k"); err != nil || k.Status != pay.StatusStarted || k.Claim != token {
		t.Fatalf("key after a stale release: %+v %v", k, err)
	}
	if released, err := db.Release(ctx, "s", "k", token, pay.ReleasedBeforeWork); err != nil || !released {
		t.Fatalf("release with its own token: %v %v", released, err)
	}
	if released, err := db.Release(ctx, "s", "k", token, pay.ReleasedBeforeWork); err != nil || released {
		t.Fatalf("a second release: %v %v", released, err)
	}
}

func lateCompletion(t *testing.T, open Open) {
	db := open(t, time.Now)
	token := claim(t, db, "k")
	if _, err := db.Release(ctx, "s", "k", token, pay.ReleasedBeforeWork); err != nil {
		t.Fatal(err)
	}
	ch := charge(time.Now())
	done, err := db.Complete(ctx, pay.Completion{ClaimRequest: request("k"), Claim: token, Status: 201, Body: ch.ResponseBody(), Charge: ch})
	if err != nil || !done.ClaimLost {
		t.Fatalf("late completion: %+v %v", done, err)
	}
	if n := charges(t, db); n != 1 {
		t.Fatalf("%d charges, want the gateway's one", n)
	}
	k, err := db.GetKey(ctx, "s", "k")
	if err != nil || k.Status != pay.StatusDone || string(k.ResponseBody) != string(ch.ResponseBody()) {
		t.Fatalf("key after the late completion: %+v %v", k, err)
	}
	if r, ok := db.CachedResponse("s", "k"); ok && string(r.Body) != string(k.ResponseBody) {
		t.Fatalf("the cache disagrees with the disk: %s", r.Body)
	}
}

func lateCompletionReclaimed(t *testing.T, open Open) {
	db := open(t, time.Now)
	first := claim(t, db, "k")
	if _, err := db.Release(ctx, "s", "k", first, pay.ReleasedBeforeWork); err != nil {
		t.Fatal(err)
	}
	second := claim(t, db, "k")
	ch := charge(time.Now())
	done, err := db.Complete(ctx, pay.Completion{ClaimRequest: request("k"), Claim: first, Status: 201, Body: ch.ResponseBody(), Charge: ch})
	if err != nil || !done.ClaimLost || string(done.Body) != string(ch.ResponseBody()) {
		t.Fatalf("late completion: %+v %v", done, err)
	}
	if k, _ := db.GetKey(ctx, "s", "k"); k.Status != pay.StatusStarted || k.Claim != second {
		t.Fatalf("the second claim lost its key: %+v", k)
	}
	if _, ok := db.CachedResponse("s", "k"); ok {
		t.Fatal("a started key has a cached answer")
	}
	// The second request reaches the same gateway charge and answers it.
	again := charge(time.Now())
	done, err = db.Complete(ctx, pay.Completion{ClaimRequest: request("k"), Claim: second, Status: 201, Body: again.ResponseBody(), Charge: again})
	if err != nil || done.ClaimLost || !done.ChargeExisted || string(done.Body) != string(ch.ResponseBody()) {
		t.Fatalf("second completion: %+v %v", done, err)
	}
	if n := charges(t, db); n != 1 {
		t.Fatalf("%d charges, want 1", n)
	}
}

func keyPaysForOneOrder(t *testing.T, open Open) {
	clock := newClock()
	db := open(t, clock.Now)
	complete(t, db, "k", claim(t, db, "k"), clock.Now())
	clock.Advance(48 * time.Hour)
	if _, err := db.Prune(ctx, clock.Now().Add(-24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	other := request("k")
	other.OrderID, other.Fingerprint = "B-2", "fp2"
	res, err := db.Claim(ctx, other)
	if err != nil || res.Claimed || res.Reused == nil || res.Reused.OrderID != "A-1" {
		t.Fatalf("claim for another order: %+v %v", res, err)
	}
	if _, err := db.GetKey(ctx, "s", "k"); pay.ErrorCode(err) != pay.ENOTFOUND {
		t.Fatalf("a refused claim wrote the key: %v", err)
	}
	if res, err := db.Claim(ctx, request("k")); err != nil || !res.Claimed {
		t.Fatalf("the same order again is a late retry and may claim: %+v %v", res, err)
	}
}

func startedBefore(t *testing.T, open Open) {
	clock := newClock()
	db := open(t, clock.Now)
	older := claim(t, db, "older")
	clock.Advance(time.Second)
	claim(t, db, "newer")
	clock.Advance(time.Second)
	complete(t, db, "done", claim(t, db, "done"), clock.Now())
	rows, err := db.StartedBefore(ctx, clock.Now().Add(-1500*time.Millisecond))
	if err != nil || len(rows) != 1 || rows[0].Key != "older" || rows[0].Claim != older {
		t.Fatalf("started before: %+v %v", rows, err)
	}
	rows, err = db.StartedBefore(ctx, clock.Now().Add(time.Hour))
	if err != nil || len(rows) != 2 || rows[0].Key != "older" || rows[1].Key != "newer" {
		t.Fatalf("every started key, oldest first: %+v %v", rows, err)
	}
}

func renewWork(t *testing.T, open Open) {
	clock := newClock()
	db := open(t, clock.Now)
	held := claim(t, db, "held")
	complete(t, db, "done", claim(t, db, "done"), clock.Now())
	before := map[string]pay.KeyRow{}
	for _, k := range []string{"held", "done"} {
		row, err := db.GetKey(ctx, "s", k)
		if err != nil {
			t.Fatal(err)
		}
		before[k] = row
	}
	clock.Advance(time.Minute)
	// Another claim, and a done key, are left as they are.
	if err := db.RenewWork(ctx, "s", "held", "not-the-claim", time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := db.RenewWork(ctx, "s", "done", before["done"].Claim, time.Hour); err != nil {
		t.Fatal(err)
	}
	for k, want := range before {
		row, err := db.GetKey(ctx, "s", k)
		if err != nil || !row.LockedAt.Equal(want.LockedAt) || row.Status != want.Status {
			t.Fatalf("%s after a renewal it is not concerned by: %+v %v, want %+v", k, row, err, want)
		}
	}
	// The claim's own renewal keeps its key started and its own.
	if err := db.RenewWork(ctx, "s", "held", held, time.Second); err != nil {
		t.Fatal(err)
	}
	row, err := db.GetKey(ctx, "s", "held")
	if err != nil || row.Status != pay.StatusStarted || row.Claim != held {
		t.Fatalf("the held key after its renewal: %+v %v", row, err)
	}
}

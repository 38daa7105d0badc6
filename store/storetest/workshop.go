package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"paytwice/pay"
)

// workshopCharges: each student's gateway keeps a key's first charge only,
// even when many of the same key race; students' books are apart; a
// student's charges read back by order and newest first, with the total.
func workshopCharges(t *testing.T, open Open) {
	clk := newClock()
	db := open(t, clk.Now)
	charge := func(key, order string, amount int64) pay.GatewayCharge {
		return pay.GatewayCharge{Key: key, ID: pay.NewID("gw_"), OrderID: order, AmountSatang: amount, CreatedAt: clk.Now()}
	}
	// Twenty of one key at once: one is kept, and all twenty are answered
	// with it.
	var wg sync.WaitGroup
	got := make([]pay.GatewayCharge, 20)
	fresh := make([]bool, 20)
	errs := make([]error, 20)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], fresh[i], _, errs[i] = db.RecordWorkshopCharge(ctx, "alice", charge("k1", "A-1", 100), 0)
		}()
	}
	wg.Wait()
	kept := 0
	for i := range got {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if fresh[i] {
			kept++
		}
		if got[i].ID != got[0].ID || got[i].Key != "k1" || got[i].OrderID != "A-1" || got[i].AmountSatang != 100 {
			t.Fatalf("answer %d is %+v, answer 0 %+v: one key, one charge", i, got[i], got[0])
		}
	}
	if kept != 1 {
		t.Fatalf("%d of 20 racing records of one key were kept, want 1", kept)
	}
	// The same key in another student's gateway is another charge.
	bob, ok, _, err := db.RecordWorkshopCharge(ctx, "bob", charge("k1", "A-1", 100), 0)
	if err != nil || !ok || bob.ID == got[0].ID {
		t.Fatalf("bob's k1: %+v kept %v, %v; want a charge of his own", bob, ok, err)
	}
	for i := 2; i <= 5; i++ {
		clk.Advance(time.Second)
		if _, ok, _, err := db.RecordWorkshopCharge(ctx, "alice", charge(fmt.Sprintf("k%d", i), fmt.Sprintf("A-%d", i%2), int64(i)), 0); err != nil || !ok {
			t.Fatalf("alice's k%d: kept %v, %v", i, ok, err)
		}
	}
	// A key again, for another order: the first charge stands.
	again, ok, _, err := db.RecordWorkshopCharge(ctx, "alice", charge("k2", "B-9", 999), 0)
	if err != nil || ok || again.OrderID != "A-0" || again.AmountSatang != 2 {
		t.Fatalf("alice's k2 again: %+v kept %v, %v; want the first charge, A-0 for 2", again, ok, err)
	}
	byOrder, inOrder, err := db.WorkshopChargesByOrder(ctx, "alice", "A-1", 10)
	if err != nil || inOrder != 3 {
		t.Fatalf("alice's order A-1: %d charges, %v; want 3", inOrder, err)
	}
	if keys := gatewayKeys(byOrder); keys != "k1 k3 k5" {
		t.Fatalf("alice's order A-1 holds %s, want k1 k3 k5", keys)
	}
	if !byOrder[1].CreatedAt.Equal(clk.Now().Add(-2 * time.Second)) {
		t.Fatalf("k3 was charged at %v, read back %v", clk.Now().Add(-2*time.Second), byOrder[1].CreatedAt)
	}
	if newest, inOrder, err := db.WorkshopChargesByOrder(ctx, "alice", "A-1", 2); err != nil || inOrder != 3 || gatewayKeys(newest) != "k3 k5" {
		t.Fatalf("alice's order A-1, newest 2: %s of %d, %v; want k3 k5 of 3", gatewayKeys(newest), inOrder, err)
	}
	newest, tally, err := db.WorkshopCharges(ctx, "alice", 3)
	if total := tally.Held; err != nil || total != 5 || gatewayKeys(newest) != "k3 k4 k5" {
		t.Fatalf("alice's newest 3: %s of %d, %v; want k3 k4 k5 of 5", gatewayKeys(newest), total, err)
	}
	if all, tally, err := db.WorkshopCharges(ctx, "bob", 10); err != nil || tally.Held != 1 || gatewayKeys(all) != "k1" {
		t.Fatalf("bob's books: %s of %v, %v; want k1 of 1", gatewayKeys(all), tally, err)
	}
	if none, tally, err := db.WorkshopCharges(ctx, "carol", 10); err != nil || tally != (pay.WorkshopTally{}) || len(none) != 0 {
		t.Fatalf("carol's books: %d of %v, %v; want none", len(none), tally, err)
	}
}

// workshopChargesPruned: a student's books past their bound prune their
// oldest charges as each new one is kept, count them, and say so in every
// tally; many charges racing never leave more than the bound; deleting a
// student's books deletes their charges and count, and no one else's.
func workshopChargesPruned(t *testing.T, open Open) {
	clk := newClock()
	db := open(t, clk.Now)
	charge := func(key string) pay.GatewayCharge {
		return pay.GatewayCharge{Key: key, ID: pay.NewID("gw_"), OrderID: "W-1", AmountSatang: 100, CreatedAt: clk.Now()}
	}
	for i := 1; i <= 7; i++ {
		_, fresh, tally, err := db.RecordWorkshopCharge(ctx, "dan", charge(fmt.Sprintf("d%d", i)), 5)
		want := pay.WorkshopTally{Held: min(i, 5), Pruned: int64(max(i-5, 0))}
		if err != nil || !fresh || tally != want {
			t.Fatalf("dan's charge %d: fresh %v, tally %+v, %v; want %+v", i, fresh, tally, err, want)
		}
	}
	// The same key again is no new charge, and prunes nothing.
	if _, fresh, tally, err := db.RecordWorkshopCharge(ctx, "dan", charge("d7"), 5); err != nil || fresh || tally != (pay.WorkshopTally{Held: 5, Pruned: 2}) {
		t.Fatalf("dan's d7 again: fresh %v, tally %+v, %v", fresh, tally, err)
	}
	held, tally, err := db.WorkshopCharges(ctx, "dan", 10)
	if err != nil || gatewayKeys(held) != "d3 d4 d5 d6 d7" || tally != (pay.WorkshopTally{Held: 5, Pruned: 2}) {
		t.Fatalf("dan's books: %s, %+v, %v; want d3…d7, 5 held and 2 pruned", gatewayKeys(held), tally, err)
	}
	if newest, inOrder, err := db.WorkshopChargesByOrder(ctx, "dan", "W-1", 3); err != nil || inOrder != 5 || gatewayKeys(newest) != "d5 d6 d7" {
		t.Fatalf("dan's order W-1, newest 3: %s of %d, %v", gatewayKeys(newest), inOrder, err)
	}
	// Eight at once, each with a key of its own, against a bound of 5.
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, _, errs[i] = db.RecordWorkshopCharge(ctx, "eli", charge(fmt.Sprintf("e%d", i)), 5)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	all, err := db.WorkshopTallies(ctx)
	if err != nil || all["eli"] != (pay.WorkshopTally{Held: 5, Pruned: 3}) || all["dan"] != (pay.WorkshopTally{Held: 5, Pruned: 2}) {
		t.Fatalf("the tallies after eight racing charges: %+v, %v; want eli 5 held and 3 pruned, dan 5 and 2", all, err)
	}
	if err := db.DeleteWorkshopBooks(ctx, "dan"); err != nil {
		t.Fatal(err)
	}
	if held, tally, err := db.WorkshopCharges(ctx, "dan", 10); err != nil || len(held) != 0 || tally != (pay.WorkshopTally{}) {
		t.Fatalf("dan's books once deleted: %d, %+v, %v", len(held), tally, err)
	}
	if all, err := db.WorkshopTallies(ctx); err != nil || len(all) != 1 || all["eli"] != (pay.WorkshopTally{Held: 5, Pruned: 3}) {
		t.Fatalf("the tallies once dan's books are deleted: %+v, %v; want eli's alone", all, err)
	}
}

// workshopStudentRemoved: once a student's books are deleted, no charge
// of theirs is kept, however it raced the deletion: each charge recorded
// while the books were being deleted was deleted with them or refused
// with pay.ErrWorkshopStudentRemoved, as is every charge afterwards;
// another student's charges go on, and a second deletion is no error.
func workshopStudentRemoved(t *testing.T, open Open) {
	clk := newClock()
	db := open(t, clk.Now)
	charge := func(key string) pay.GatewayCharge {
		return pay.GatewayCharge{Key: key, ID: pay.NewID("gw_"), OrderID: "R-1", AmountSatang: 100, CreatedAt: clk.Now()}
	}
	if _, _, _, err := db.RecordWorkshopCharge(ctx, "fay", charge("f0"), 0); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 20)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, _, errs[i] = db.RecordWorkshopCharge(ctx, "fay", charge(fmt.Sprintf("f%d", i+1)), 0)
		}()
		if i == len(errs)/2 {
			if err := db.DeleteWorkshopBooks(ctx, "fay", "fay"); err != nil {
				t.Fatal(err)
			}
		}
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil && !errors.Is(err, pay.ErrWorkshopStudentRemoved) {
			t.Fatalf("fay's charge %d racing the deletion: %v", i+1, err)
		}
	}
	if err := db.DeleteWorkshopBooks(ctx, "fay"); err != nil {
		t.Fatalf("deleting fay's books again: %v", err)
	}
	if _, _, _, err := db.RecordWorkshopCharge(ctx, "fay", charge("f-late"), 0); !errors.Is(err, pay.ErrWorkshopStudentRemoved) {
		t.Fatalf("a charge of fay's after the deletion: %v, want pay.ErrWorkshopStudentRemoved", err)
	}
	if _, fresh, _, err := db.RecordWorkshopCharge(ctx, "gil", charge("g1"), 0); err != nil || !fresh {
		t.Fatalf("gil's charge after fay's removal: fresh %v, %v", fresh, err)
	}
	if held, tally, err := db.WorkshopCharges(ctx, "fay", 100); err != nil || len(held) != 0 || tally != (pay.WorkshopTally{}) {
		t.Fatalf("fay's books after her removal: %s, %+v, %v; want none", gatewayKeys(held), tally, err)
	}
	if all, err := db.WorkshopTallies(ctx); err != nil || len(all) != 1 || all["gil"] != (pay.WorkshopTally{Held: 1}) {
		t.Fatalf("the tallies after fay's removal: %+v, %v; want gil's alone", all, err)
	}
}

// workshopRemovedForgotten: the store remembers a removed student for
// pay.WorkshopRemovedFor, counted from their last removal, and forgets
// them at the first removal after that (any student's); a removal is the
// only thing that adds a row, so the rows are at most that long's
// removals. A charge of a student the store forgot is kept like anyone's:
// no server knows that student any more, so none sends one.
func workshopRemovedForgotten(t *testing.T, open Open) {
	clk := newClock()
	db := open(t, clk.Now)
	charge := func(key string) pay.GatewayCharge {
		return pay.GatewayCharge{Key: key, ID: pay.NewID("gw_"), OrderID: "F-1", AmountSatang: 100, CreatedAt: clk.Now()}
	}
	refused := func(student string) bool {
		t.Helper()
		_, _, _, err := db.RecordWorkshopCharge(ctx, student, charge(pay.NewID("k_")), 0)
		if err != nil && !errors.Is(err, pay.ErrWorkshopStudentRemoved) {
			t.Fatalf("a charge of %s: %v", student, err)
		}
		return err != nil
	}
	remove := func(students ...string) {
		t.Helper()
		if err := db.DeleteWorkshopBooks(ctx, students...); err != nil {
			t.Fatalf("removing %v: %v", students, err)
		}
	}
	remove("ann")
	clk.Advance(pay.WorkshopRemovedFor / 2)
	remove("bo")
	clk.Advance(pay.WorkshopRemovedFor / 2)
	remove("cy") // ann's removal is exactly WorkshopRemovedFor old: kept
	if !refused("ann") || !refused("bo") || !refused("cy") {
		t.Fatal("a removal within pay.WorkshopRemovedFor was forgotten")
	}
	clk.Advance(time.Millisecond)
	if !refused("ann") {
		t.Fatal("ann was forgotten with no removal since: only a removal forgets")
	}
	remove("dee")
	if refused("ann") {
		t.Fatalf("ann, removed %s ago, is still remembered after another removal", pay.WorkshopRemovedFor+time.Millisecond)
	}
	if !refused("bo") || !refused("cy") || !refused("dee") {
		t.Fatal("a later removal was forgotten with ann's")
	}
	// Removed again (the books could not be deleted the first time): the
	// day counts from the last removal.
	clk.Advance(pay.WorkshopRemovedFor / 2)
	remove("bo")
	clk.Advance(pay.WorkshopRemovedFor/2 + time.Millisecond)
	remove("eve")
	if refused("cy") || refused("dee") {
		t.Fatal("cy and dee, removed more than pay.WorkshopRemovedFor ago, are still remembered")
	}
	if !refused("bo") || !refused("eve") {
		t.Fatal("bo, removed again half a day ago, or eve was forgotten")
	}
}

func gatewayKeys(cs []pay.GatewayCharge) string {
	s := ""
	for i, c := range cs {
		if i > 0 {
			s += " "
		}
		s += c.Key
	}
	return s
}

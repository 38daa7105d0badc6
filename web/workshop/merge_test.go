package workshop

import (
	"context"
	"encoding/json"
	"net/netip"
	"testing"
)

// TestASaveKeepsTheHigherCountAnotherServerKept: two servers share the
// kept workshop and each counts the charges taken through it. The first
// saving its own count (none) after the second kept three charges taken
// through it wrote the student's row back to none, and with the second's
// next save an hour away the kept scoreboard said none for that hour.
func TestASaveKeepsTheHigherCountAnotherServerKept(t *testing.T) {
	ctx := context.Background()
	keeper := &memoryKeeper{}
	w := New(Config{Guard: NewGuard(Nets(netip.MustParsePrefix("127.0.0.2/32"))), Keeper: keeper})
	w.SetOn(true)
	if _, err := w.Register(ctx, "jo", "10.0.0.1", "Jo", "http://127.0.0.2:8000"); err != nil {
		t.Fatal(err)
	}
	if !w.save(ctx) {
		t.Fatal("the first save was refused")
	}
	// The other server's save: Jo with three charges, one pruned.
	var doc map[string]any
	if err := json.Unmarshal(keeper.doc, &doc); err != nil {
		t.Fatal(err)
	}
	students := doc["students"].([]any)
	if len(students) != 1 {
		t.Fatalf("kept %d students, want Jo alone: %s", len(students), keeper.doc)
	}
	jo := students[0].(map[string]any)
	jo["charges"], jo["pruned"] = 3, 1
	keeper.doc, _ = json.Marshal(doc)

	w.Hide("Jo") // a change of this server's: it saves again
	if !w.save(ctx) {
		t.Fatal("the second save was refused")
	}
	var k kept
	if err := json.Unmarshal(keeper.doc, &k); err != nil {
		t.Fatal(err)
	}
	if len(k.Students) != 1 || k.Students[0].Charges != 3 || k.Students[0].Pruned != 1 || !k.Students[0].Hidden {
		t.Fatalf("after this server's save the kept Jo is %+v, want 3 charges, 1 pruned, hidden", k.Students)
	}
}

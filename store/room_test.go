package store

import (
	"context"
	"path/filepath"
	"testing"

	"paytwice/pay"
)

// TestRoomIsKeptInTheFile saves the room's state, closes the file, opens
// it again and reads the same state and version: what a restarted server
// starts from.
func TestRoomIsKeptInTheFile(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "room.db")
	db, err := Open(path, Options{Schema: pay.SchemaPayments})
	if err != nil {
		t.Fatal(err)
	}
	state, version, err := db.LoadRoom(ctx)
	if err != nil || string(state) != "{}" || version != 0 {
		t.Fatalf("a new file's room: %q %d %v, want {} 0", state, version, err)
	}
	want := `{"lesson":"check-then-insert","step_mode":true,"resets":3}`
	if err := db.SaveRoom(ctx, []byte(want), 7); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = Open(path, Options{Schema: pay.SchemaPayments})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	state, version, err = db.LoadRoom(ctx)
	if err != nil || string(state) != want || version != 7 {
		t.Fatalf("after reopening: %q %d %v, want %q 7", state, version, err, want)
	}
	// A reset of the books leaves the room: it is the room's own to reset.
	if err := db.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	if state, _, _ := db.LoadRoom(ctx); string(state) != want {
		t.Fatalf("after a reset of the books: %q", state)
	}
}

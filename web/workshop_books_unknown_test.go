package web

import (
	"context"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestWorkshopSharedBoardWithoutTheBooks: with two servers on one
// PostgreSQL database, when the books' count cannot be read (its table
// gone), every board keeps the room's kept rows and runs, and says the
// charges are not known right now, on the page and in the API, instead of
// a count or this server's own rows.
func TestWorkshopSharedBoardWithoutTheBooks(t *testing.T) {
	waitsOnRealClocks(t)
	c := newClass(t)
	c.postgresOnly(t)
	a := c.server(Config{WorkshopAllow: workshopStudentNets}, nil)
	if r := a.send(http.MethodPut, workshopAPI, WorkshopSettings{On: &workshopOpen}); r.Status != http.StatusOK {
		t.Fatalf("opening the workshop: %d %s", r.Status, r.Body)
	}
	tok := "jo-" + hex.EncodeToString(randomBytes(8))
	me := registerStudent(t, a, tok, "Jo", "http://"+freeAddr(t, "127.0.0.2"))
	secret := strings.TrimPrefix(me.Gateway, a.URL+workshopGateways)
	// The second server starts once the first has kept Jo, and reads Jo
	// at its start.
	waitWorkshopKeeps(t, c, secret)
	b := c.server(Config{WorkshopAllow: workshopStudentNets}, nil)
	req, _ := http.NewRequest(http.MethodPost, b.URL+workshopGateways+secret+"/charges", strings.NewReader(`{"order_id":"J-1","amount":100}`))
	req.Header.Set("Idempotency-Key", "jo-1")
	r, err := do(req)
	if err != nil || r.Status != http.StatusCreated {
		t.Fatalf("a charge through the second server: %v %d %s", err, r.Status, r.Body)
	}
	for name, env := range map[string]*testEnv{"first": a, "second": b} {
		if row := boardRowWhen(t, env, "Jo", func(r WorkshopStudent) bool { return r.Charges == 1 }); row.Charges != 1 || row.ChargesUnknown {
			t.Fatalf("the %s server's board with the books answering: %+v, want Jo's 1 charge", name, row)
		}
	}

	conn, err := pgx.Connect(t.Context(), c.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(t.Context(), `ALTER TABLE workshop_charges RENAME TO workshop_charges_away`); err != nil {
		t.Fatal(err)
	}
	for name, env := range map[string]*testEnv{"first": a, "second": b} {
		row := boardRowWhen(t, env, "Jo", func(r WorkshopStudent) bool { return r.ChargesUnknown })
		if !row.ChargesUnknown || row.Charges != 0 || row.Pruned != 0 {
			t.Errorf("the %s server's board, the books failing: %+v, want Jo's charges not known and no count", name, row)
		}
		if row.State != me.State {
			t.Errorf("the %s server's board, the books failing: Jo's run is %q, want %q as kept", name, row.State, me.State)
		}
		r := env.send(http.MethodGet, "/workshop/-/scores", nil)
		if body := string(r.Body); r.Status != http.StatusOK || !strings.Contains(body, `data-charges="unknown" data-pruned="unknown">not known right now`) || !strings.Contains(body, "Jo") {
			t.Errorf("the %s server's scoreboard page, the books failing, does not show Jo with charges not known: %d %s", name, r.Status, body)
		}
	}
}

// boardRowWhen is name's row on env's scoreboard once ok says it is what
// the books say now, or after 30 s the last row read: the books' last
// count serves the boards fetched within a quarter of a second of it.
func boardRowWhen(t *testing.T, env *testEnv, name string, ok func(WorkshopStudent) bool) WorkshopStudent {
	t.Helper()
	row := boardRow(t, env, name)
	for deadline := time.Now().Add(30 * time.Second); !ok(row) && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		row = boardRow(t, env, name)
	}
	return row
}

package web

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestWorkshopServersAgreeOnTheBooks: two servers on one database (both
// PostgreSQL with PAYTWICE_TEST_POSTGRES) serve one student's gateway;
// charges taken through each count on both, pruned included: the student's
// view on either says every charge.
func TestWorkshopServersAgreeOnTheBooks(t *testing.T) {
	waitsOnRealClocks(t)
	c := newClass(t)
	cfg := Config{WorkshopAllow: workshopStudentNets, workshopBooksCap: 3}
	a := c.server(cfg, nil)
	if r := a.send(http.MethodPut, workshopAPI, WorkshopSettings{On: &workshopOpen}); r.Status != http.StatusOK {
		t.Fatalf("opening the workshop: %d %s", r.Status, r.Body)
	}
	tok := "ida-" + hex.EncodeToString(randomBytes(8))
	me := registerStudent(t, a, tok, "Ida", "http://"+freeAddr(t, "127.0.0.2"))
	secret := strings.TrimPrefix(me.Gateway, a.URL+workshopGateways)
	// The second server starts once the first has kept the student.
	waitWorkshopKeeps(t, c, secret)
	b := c.server(cfg, nil)
	for i, env := range []*testEnv{a, b, a, b, a} {
		req, _ := http.NewRequest(http.MethodPost, env.URL+workshopGateways+secret+"/charges", strings.NewReader(`{"order_id":"W-1","amount":100}`))
		req.Header.Set("Idempotency-Key", fmt.Sprintf("ida-%d", i))
		if r, err := do(req); err != nil || r.Status != http.StatusCreated {
			t.Fatalf("charge %d through server %d: %v %d %s", i, i%2, err, r.Status, r.Body)
		}
	}
	for name, env := range map[string]*testEnv{"first": a, "second": b} {
		var v WorkshopStudent
		r := env.send(http.MethodGet, workshopAPI+"/me", nil, "Authorization", "Bearer "+tok)
		if err := json.Unmarshal(r.Body, &v); err != nil || r.Status != http.StatusOK || v.Charges != 5 || v.Pruned != 2 {
			t.Errorf("/me on the %s server after 5 charges through both, bounded at 3: %d %s; want gateway_charges 5, gateway_pruned 2", name, r.Status, r.Body)
		}
	}
}

// TestWorkshopSharedBoardCountsTheBooksNow: with two servers on one
// database, every board shows a student's gateway charges as the books
// hold them at its fetch, not as the workshop's last save: the second
// server here saves at most once an hour, so after its first save only
// the books can say the charges taken through it. The pruned are said
// apart on the page.
func TestWorkshopSharedBoardCountsTheBooksNow(t *testing.T) {
	waitsOnRealClocks(t)
	c := newClass(t)
	a := c.server(Config{WorkshopAllow: workshopStudentNets, workshopBooksCap: 2}, nil)
	if r := a.send(http.MethodPut, workshopAPI, WorkshopSettings{On: &workshopOpen}); r.Status != http.StatusOK {
		t.Fatalf("opening the workshop: %d %s", r.Status, r.Body)
	}
	tok := "jo-" + hex.EncodeToString(randomBytes(8))
	me := registerStudent(t, a, tok, "Jo", "http://"+freeAddr(t, "127.0.0.2"))
	secret := strings.TrimPrefix(me.Gateway, a.URL+workshopGateways)
	keptCharges := func() int {
		doc, err := c.Peers.LoadWorkshop(context.Background())
		var k struct {
			Students []struct {
				Secret  string `json:"secret"`
				Charges int    `json:"charges"`
			} `json:"students"`
		}
		if err != nil || json.Unmarshal(doc, &k) != nil {
			return -1
		}
		for _, s := range k.Students {
			if s.Secret == secret {
				return s.Charges
			}
		}
		return -1
	}
	waitKept := func(want int) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); keptCharges() != want; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the kept workshop does not hold Jo with %d charges after 30 s (it says %d)", want, keptCharges())
			}
		}
	}
	waitKept(0)
	b := c.server(Config{WorkshopAllow: workshopStudentNets, workshopBooksCap: 2, workshopSaveEvery: time.Hour}, nil)
	charge := func(i int) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, b.URL+workshopGateways+secret+"/charges", strings.NewReader(`{"order_id":"J-1","amount":100}`))
		req.Header.Set("Idempotency-Key", fmt.Sprintf("jo-%d", i))
		if r, err := do(req); err != nil || r.Status != http.StatusCreated {
			t.Fatalf("charge %d: %v %d %s", i, err, r.Status, r.Body)
		}
	}
	// The second server's first change is saved at once; the next waits
	// an hour.
	charge(0)
	waitKept(1)
	charge(1)
	charge(2)
	if n := keptCharges(); n != 1 {
		t.Fatalf("the kept workshop says %d charges: the second server saved again within the hour", n)
	}
	for name, env := range map[string]*testEnv{"first": a, "second": b} {
		if row := boardRowWhen(t, env, "Jo", func(r WorkshopStudent) bool { return r.Charges == 3 }); row.Charges != 3 || row.Pruned != 1 {
			t.Errorf("the %s server's board right after 3 charges, books bounded at 2: gateway_charges %d, gateway_pruned %d; want 3 and 1", name, row.Charges, row.Pruned)
		}
		r := env.send(http.MethodGet, "/workshop/-/scores", nil)
		if r.Status != http.StatusOK || !strings.Contains(string(r.Body), `data-charges="3" data-pruned="1">3 (1 pruned from the books)<`) {
			t.Errorf("the %s server's scoreboard page does not say 3 charges, 1 of them pruned: %d %s", name, r.Status, r.Body)
		}
	}
}

// waitWorkshopKeeps waits until the room's kept workshop holds the
// student whose gateway secret is secret: a server started after that
// reads the student at its start, and one started before a save does not
// hear of the student later (a server knows the students it restored and
// those registered through it).
func waitWorkshopKeeps(t *testing.T, c *class, secret string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		doc, err := c.Peers.LoadWorkshop(context.Background())
		if err == nil && strings.Contains(string(doc), secret) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the student is not kept after 30 s: %s %v", doc, err)
		}
	}
}

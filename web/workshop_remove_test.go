package web

import (
	"context"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"paytwice/pay"
)

// TestWorkshopPresenterRemovesAndResets: with two servers on one database
// (PostgreSQL with PAYTWICE_TEST_POSTGRES), a student may neither remove
// another nor reset the workshop (403, nothing removed); the presenter
// removes one student on the second server and resets on the first: the
// students leave both scoreboards at once, their gateways answer no more,
// their books are deleted, no server's save writes them back, and a
// student registering afterwards starts with empty books.
func TestWorkshopPresenterRemovesAndResets(t *testing.T) {
	waitsOnRealClocks(t)
	const presenter = "teach-remove-36"
	c := newClass(t)
	cfg := Config{WorkshopAllow: workshopStudentNets, PresenterToken: presenter}
	a := c.server(cfg, nil)
	if r := a.send(http.MethodPut, workshopAPI, WorkshopSettings{On: &workshopOpen}, PresenterHeader, presenter); r.Status != http.StatusOK {
		t.Fatalf("opening the workshop: %d %s", r.Status, r.Body)
	}
	tokens, secrets := map[string]string{}, map[string]string{}
	for _, name := range []string{"Ana", "Ben", "Cat"} {
		tokens[name] = strings.ToLower(name) + "-" + hex.EncodeToString(randomBytes(8))
		me := registerStudent(t, a, tokens[name], name, "http://"+freeAddr(t, "127.0.0.2"))
		secrets[name] = strings.TrimPrefix(me.Gateway, a.URL+workshopGateways)
	}
	charge := func(env *testEnv, name string, i int) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, env.URL+workshopGateways+secrets[name]+"/charges", strings.NewReader(`{"order_id":"R-1","amount":100}`))
		req.Header.Set("Idempotency-Key", fmt.Sprintf("%s-%d", name, i))
		r, err := do(req)
		if err != nil {
			t.Fatal(err)
		}
		return r.Status
	}
	for _, name := range []string{"Ana", "Ben", "Cat"} {
		if s := charge(a, name, 0); s != http.StatusCreated {
			t.Fatalf("%s's first charge: %d", name, s)
		}
	}
	books := c.Store.(interface {
		WorkshopTallies(context.Context) (map[string]pay.WorkshopTally, error)
	})
	held := func(name string) int {
		t.Helper()
		all, err := books.WorkshopTallies(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return all[secrets[name]].Held
	}
	// The second server starts once the first has kept the three.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		doc, err := c.Peers.LoadWorkshop(context.Background())
		if err == nil && strings.Contains(string(doc), secrets["Cat"]) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the students are not kept after 30 s: %s %v", doc, err)
		}
	}
	b := c.server(cfg, nil)
	names := func(env *testEnv) string {
		t.Helper()
		var v WorkshopBoard
		env.decodeGet(workshopAPI, &v)
		var out []string
		for _, s := range v.Students {
			out = append(out, s.Name)
		}
		return strings.Join(out, ",")
	}

	t.Run("a student may not remove or reset", func(t *testing.T) {
		for _, r := range []response{
			b.send(http.MethodPost, workshopAPI+"/remove", WorkshopRemove{Name: "Ben"}, "Authorization", "Bearer "+tokens["Ana"]),
			b.send(http.MethodPost, workshopAPI+"/reset", nil, "Authorization", "Bearer "+tokens["Ana"]),
		} {
			if r.Status != http.StatusForbidden || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/problem+json") || !strings.Contains(string(r.Body), "presenter") {
				t.Errorf("a student's removal: %d %s %s, want 403 problem+json naming the presenter", r.Status, r.Header.Get("Content-Type"), r.Body)
			}
		}
		form := url.Values{"name": {"Ben"}}
		req, _ := http.NewRequest(http.MethodPost, b.URL+"/workshop/-/remove", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Authorization", "Bearer "+tokens["Ana"])
		if r, err := do(req); err != nil || r.Status != http.StatusForbidden {
			t.Errorf("a student's removal through the page's form: %v %d %s, want 403", err, r.Status, r.Body)
		}
		if got := names(a) + " / " + names(b); got != "Ana,Ben,Cat / Ana,Ben,Cat" {
			t.Errorf("the scoreboards after a student's removals: %s, want all three on both", got)
		}
	})

	t.Run("the presenter removes one student on another server", func(t *testing.T) {
		if r := b.send(http.MethodPost, workshopAPI+"/remove", WorkshopRemove{Name: "Nobody"}, PresenterHeader, presenter); r.Status != http.StatusNotFound {
			t.Errorf("removing a name nobody registered: %d %s, want 404", r.Status, r.Body)
		}
		r := b.send(http.MethodPost, workshopAPI+"/remove", WorkshopRemove{Name: "Ben"}, PresenterHeader, presenter)
		if r.Status != http.StatusOK || !strings.Contains(string(r.Body), `"removed":1`) {
			t.Fatalf("removing Ben: %d %s", r.Status, r.Body)
		}
		if got := names(a) + " / " + names(b); got != "Ana,Cat / Ana,Cat" {
			t.Errorf("the scoreboards right after Ben's removal: %s, want Ana,Cat on both", got)
		}
		if n := held("Ben"); n != 0 {
			t.Errorf("Ben's books hold %d charges after his removal", n)
		}
		// The first server, which registered Ben, hears of it: his
		// gateway answers no more there, and its saves leave him out.
		for deadline := time.Now().Add(30 * time.Second); charge(a, "Ben", 1) != http.StatusNotFound; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("Ben's gateway on the first server still answers 30 s after his removal")
			}
		}
		if s := charge(a, "Ana", 1); s != http.StatusCreated { // a change the first server saves
			t.Fatalf("Ana's second charge: %d", s)
		}
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			doc, err := c.Peers.LoadWorkshop(context.Background())
			if err == nil && strings.Contains(string(doc), `"charges":2`) {
				if strings.Contains(string(doc), `"name":"Ben"`) {
					t.Errorf("the first server's save wrote Ben back: %s", doc)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the first server did not save Ana's second charge in 30 s: %s %v", doc, err)
			}
		}
		if n := held("Ben"); n != 0 {
			t.Errorf("Ben's books hold %d charges: a charge reached them after his removal", n)
		}
		if r := a.send(http.MethodGet, workshopAPI+"/me", nil, "Authorization", "Bearer "+tokens["Ben"]); r.Status == http.StatusOK {
			t.Errorf("Ben's own view after his removal: %d %s, want him unknown", r.Status, r.Body)
		}
	})

	t.Run("the presenter resets the workshop", func(t *testing.T) {
		r := a.send(http.MethodPost, workshopAPI+"/reset", nil, PresenterHeader, presenter)
		if r.Status != http.StatusOK || !strings.Contains(string(r.Body), `"removed":2`) {
			t.Fatalf("resetting: %d %s, want 2 removed", r.Status, r.Body)
		}
		if got := names(a) + " / " + names(b); got != " / " {
			t.Errorf("the scoreboards right after the reset: %q, want both empty", got)
		}
		for _, name := range []string{"Ana", "Cat"} {
			if n := held(name); n != 0 {
				t.Errorf("%s's books hold %d charges after the reset", name, n)
			}
			if s := charge(a, name, 2); s != http.StatusNotFound {
				t.Errorf("%s's gateway after the reset: %d, want 404", name, s)
			}
		}
		// Ana registers again: a new gateway, empty books, on both boards.
		me := registerStudent(t, a, tokens["Ana"], "Ana", "http://"+freeAddr(t, "127.0.0.2"))
		if strings.HasSuffix(me.Gateway, secrets["Ana"]) || me.Charges != 0 {
			t.Errorf("Ana registering after the reset: %+v, want a new gateway with no charge", me)
		}
		for deadline := time.Now().Add(30 * time.Second); names(b) != "Ana"; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the second server's board after Ana registered again: %q", names(b))
			}
		}
	})
}

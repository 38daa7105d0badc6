package web

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"paytwice/web/live"
	"paytwice/web/room"
)

// TestLabCheck runs the lab page's checker: with the right protocol its
// table passes; with check-then-insert it fails the storm of one key.
func TestLabCheck(t *testing.T) {
	waitsOnRealClocks(t)
	env := newTestEnv(t, Config{})
	run := func(t *testing.T) string {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, env.URL+"/lab/check", nil)
		req.Header.Set("HX-Request", "true")
		r, err := do(req)
		if err != nil || r.Status != http.StatusOK {
			t.Fatalf("POST /lab/check: %v %d %s", err, r.Status, r.Body)
		}
		return string(r.Body)
	}
	t.Run("the right protocol passes", func(t *testing.T) {
		page := run(t)
		if !strings.Contains(page, "PASSED") || strings.Contains(page, ">FAIL") || !strings.Contains(page, "linearizable") || strings.Contains(page, "Mistake") {
			t.Fatalf("table:\n%s", page)
		}
	})
	t.Run("check then insert fails the storm, and the table says why", func(t *testing.T) {
		env.putLab(room.LabSettings{Server: room.LabServer{Mode: room.LabCheckThenInsert, CheckGapMS: 50}})
		page := run(t)
		i := strings.Index(page, "storm of one key")
		if !strings.Contains(page, "FAILED") || i < 0 || !strings.Contains(page[i:], "FAIL (safety)") || !strings.Contains(page, "different successful bodies") ||
			!strings.Contains(page, "Mistake 3, Check first, then insert.") || !strings.Contains(page, "ON CONFLICT DO NOTHING") {
			t.Fatalf("table:\n%s", page)
		}
	})
	t.Run("only the presenter runs it", func(t *testing.T) {
		locked := newTestEnv(t, Config{PresenterToken: "s3cret"})
		r, err := do(mustRequest(t, http.MethodPost, locked.URL+"/lab/check"))
		if err != nil || r.Status != http.StatusForbidden {
			t.Fatalf("%v %d %s", err, r.Status, r.Body)
		}
	})
}

func mustRequest(t *testing.T, method, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// Each run of the lab's checker is two callers of its own, with
// credentials drawn for that run, and keys and ids of 128 random bits:
// nothing the timeline shows of one run names its scopes, or lets a
// student foresee the next run's keys and ids and send them first.
func TestLabCheckRunsInScopesOfItsOwn(t *testing.T) {
	waitsOnRealClocks(t)
	env := newTestEnv(t, Config{})
	idShape := regexp.MustCompile(`^chk-[0-9a-f]{32}-[0-9]+$`)
	keyShape := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	type seen struct{ scopes, keys, orders map[string]bool }
	run := func() seen {
		t.Helper()
		env.Server.hub.Clear()
		v := env.Server.lab.check.runLabCheck(context.Background(), env.URL)
		if v.Failed || len(v.Rows) == 0 {
			t.Fatalf("the run: %s %+v", v.Message, v.Summary)
		}
		s := seen{map[string]bool{}, map[string]bool{}, map[string]bool{}}
		for _, e := range env.Server.hub.Recent(live.DefaultSize) {
			if e.Kind != live.Received {
				continue
			}
			s.scopes[e.Scope] = true
			if keyShape.MatchString(e.Key) {
				s.keys[e.Key] = true
			}
			if e.OrderID != "" {
				if !idShape.MatchString(e.OrderID) {
					t.Fatalf("order id %q is not 128 random bits and a count", e.OrderID)
				}
				s.orders[e.OrderID] = true
			}
		}
		return s
	}
	a, b := run(), run()
	for _, s := range []seen{a, b} {
		if len(s.scopes) != 2 || s.scopes[AnonymousScope] || s.scopes["token:"+scopeID("lab-checker")] || len(s.keys) < 10 || len(s.orders) < 10 {
			t.Fatalf("a run's scopes %v (want two of its own), %d keys, %d orders", s.scopes, len(s.keys), len(s.orders))
		}
	}
	for scope := range a.scopes {
		if b.scopes[scope] {
			t.Fatalf("two runs share the scope %s", scope)
		}
	}
	for key := range a.keys {
		if b.keys[key] {
			t.Fatalf("two runs share the key %s", key)
		}
	}
	for order := range a.orders {
		if b.orders[order] {
			t.Fatalf("two runs share the order id %s", order)
		}
	}
}

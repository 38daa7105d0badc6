package web

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// chargeStorm sends n charges, each with a key of its own, to gateway
// from workers goroutines at once, and counts the answers by status.
func chargeStorm(t *testing.T, gateway string, n, workers int) map[int]int {
	t.Helper()
	var next atomic.Int64
	var mu sync.Mutex
	got := map[int]int{}
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= int64(n); i = next.Add(1) {
				req, _ := http.NewRequest(http.MethodPost, gateway+"/charges", strings.NewReader(fmt.Sprintf(`{"order_id":"S-%d","amount":100}`, i%7)))
				req.Header.Set("Idempotency-Key", fmt.Sprintf("storm-%d", i))
				r, err := do(req)
				if err != nil {
					t.Errorf("charge %d: %v", i, err)
					return
				}
				if r.Status == http.StatusTooManyRequests && r.Header.Get("Retry-After") == "" {
					t.Errorf("a 429 without Retry-After: %s", r.Body)
				}
				mu.Lock()
				got[r.Status]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return got
}

// TestWorkshopGatewayStormIsRefused: a loop charging one student's
// gateway as fast as it can is refused 429 past the gateway's share; only
// the charges let through reach the books, and the student's own view
// counts exactly those.
func TestWorkshopGatewayStormIsRefused(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, Config{WorkshopAllow: workshopStudentNets, Limits: Limits{WorkshopGateway: Rate{Burst: 40, Every: time.Hour}}})
	if r := env.send(http.MethodPut, workshopAPI, WorkshopSettings{On: &workshopOpen}); r.Status != http.StatusOK {
		t.Fatalf("opening the workshop: %d %s", r.Status, r.Body)
	}
	tok := "gus-" + hex.EncodeToString(randomBytes(8))
	me := registerStudent(t, env, tok, "Gus", "http://"+freeAddr(t, "127.0.0.2"))
	got := chargeStorm(t, me.Gateway, 1000, 8)
	if got[http.StatusCreated] != 40 || got[http.StatusTooManyRequests] != 960 {
		t.Fatalf("a storm of 1000 charges against a share of 40: %v, want 40 created and 960 refused", got)
	}
	var v WorkshopStudent
	r := env.send(http.MethodGet, workshopAPI+"/me", nil, "Authorization", "Bearer "+tok)
	if err := json.Unmarshal(r.Body, &v); err != nil || v.Charges != 40 {
		t.Fatalf("/me after the storm: %v %s, want gateway_charges 40", err, r.Body)
	}
}

// TestWorkshopGatewayBooksStayWithinTheirCap: with books bounded at 5,
// seven charges leave the five newest in the store, and the student's own
// view counts all seven, two of them pruned; an order's listing says how
// many it holds and how many the gateway pruned; a storm of a thousand
// charges leaves the books at their bound, and the view adds up.
func TestWorkshopGatewayBooksStayWithinTheirCap(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, Config{WorkshopAllow: workshopStudentNets, workshopBooksCap: 5,
		Limits: Limits{WorkshopGateway: Rate{Burst: 300, Every: time.Hour}}})
	if r := env.send(http.MethodPut, workshopAPI, WorkshopSettings{On: &workshopOpen}); r.Status != http.StatusOK {
		t.Fatalf("opening the workshop: %d %s", r.Status, r.Body)
	}
	tok := "hal-" + hex.EncodeToString(randomBytes(8))
	me := registerStudent(t, env, tok, "Hal", "http://"+freeAddr(t, "127.0.0.2"))
	for i := 1; i <= 7; i++ {
		req, _ := http.NewRequest(http.MethodPost, me.Gateway+"/charges", strings.NewReader(`{"order_id":"W-1","amount":100}`))
		req.Header.Set("Idempotency-Key", fmt.Sprintf("hal-%d", i))
		if r, err := do(req); err != nil || r.Status != http.StatusCreated {
			t.Fatalf("charge %d: %v %d %s", i, err, r.Status, r.Body)
		}
	}
	mine := func() WorkshopStudent {
		t.Helper()
		var v WorkshopStudent
		r := env.send(http.MethodGet, workshopAPI+"/me", nil, "Authorization", "Bearer "+tok)
		if err := json.Unmarshal(r.Body, &v); err != nil || r.Status != http.StatusOK {
			t.Fatalf("/me: %d %s", r.Status, r.Body)
		}
		return v
	}
	secret := strings.TrimPrefix(me.Gateway, env.URL+workshopGateways)
	held, tally, err := env.DB.WorkshopCharges(context.Background(), secret, 100)
	if err != nil || len(held) != 5 || tally.Held != 5 || tally.Pruned != 2 || held[0].Key != "hal-3" {
		t.Fatalf("the store after 7 charges with a bound of 5: %d rows from %v, %+v, %v; want hal-3…hal-7, 2 pruned", len(held), held, tally, err)
	}
	if v := mine(); v.Charges != 7 || v.Pruned != 2 {
		t.Fatalf("/me after 7 charges with a bound of 5: gateway_charges %d, gateway_pruned %d; want 7 and 2", v.Charges, v.Pruned)
	}
	var list struct {
		Charges []struct{ Key string }
		Total   int
		Pruned  int64
	}
	r := env.get(strings.TrimPrefix(me.Gateway, env.URL) + "/charges?order_id=W-1")
	if err := json.Unmarshal(r.Body, &list); err != nil || len(list.Charges) != 5 || list.Total != 5 || list.Pruned != 2 {
		t.Fatalf("the order's listing: %d %s; want its 5 kept, total 5, pruned 2", r.Status, r.Body)
	}
	got := chargeStorm(t, me.Gateway, 1000, 8)
	if got[http.StatusCreated] != 292 || got[http.StatusTooManyRequests] != 708 {
		t.Fatalf("a storm of 1000 with 292 left (7 charges and a listing taken) of the gateway's share: %v", got)
	}
	if _, tally, err := env.DB.WorkshopCharges(context.Background(), secret, 100); err != nil || tally.Held != 5 || tally.Pruned != 294 {
		t.Fatalf("the store after the storm: %+v, %v; want 5 held and 294 pruned", tally, err)
	}
	if v := mine(); v.Charges != 299 || v.Pruned != 294 {
		t.Fatalf("/me after the storm: gateway_charges %d, gateway_pruned %d; want 299 and 294", v.Charges, v.Pruned)
	}
}

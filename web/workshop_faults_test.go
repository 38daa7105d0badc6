package web

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"paytwice/sim"
)

// TestWorkshopPresenterSlowsEveryGateway: the presenter's latency and
// held answer reach every student's gateway at once: a charge through
// each of two students' gateways is made, and its answer comes no sooner
// than the latency and the hold together (a lower bound, which no load on
// the machine can break). What each switch does at a gateway is sim's
// TestGatewayHandler; the drop after the charge is
// TestWorkshopPresenterFaults'.
func TestWorkshopPresenterSlowsEveryGateway(t *testing.T) {
	waitsOnRealClocks(t) // the gateways' latency and hold, a lower bound
	const token = "teach-slow-3"
	env := newWorkshopEnvWith(t, token)
	const latency, hold = 200 * time.Millisecond, 800 * time.Millisecond
	slow := WorkshopSettings{On: &workshopOpen, Faults: sim.GatewayBaseFaults{LatencyMS: int(latency.Milliseconds()), HoldAnswerMS: int(hold.Milliseconds())}}
	if r := env.send(http.MethodPut, workshopAPI, slow, PresenterHeader, token); r.Status != http.StatusOK {
		t.Fatalf("slowing every gateway: %d %s", r.Status, r.Body)
	}
	gateways := map[string]string{}
	for _, name := range []string{"Ida", "Jo"} {
		gateways[name] = registerStudent(t, env, strings.ToLower(name)+"-slow", name, "http://127.0.0.2:8000").Gateway
	}
	var wg sync.WaitGroup
	for name, gw := range gateways {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			req, err := http.NewRequest(http.MethodPost, gw+"/charges", strings.NewReader(`{"order_id": "slow-1", "amount": 100}`))
			if err != nil {
				t.Error(err)
				return
			}
			req.Header.Set("Idempotency-Key", "slow-"+name)
			res, err := (&http.Client{Timeout: 2 * time.Minute}).Do(req)
			if err != nil {
				t.Errorf("%s's charge: %v", name, err)
				return
			}
			res.Body.Close()
			status, took := res.StatusCode, time.Since(start)
			var l struct{ Charges int }
			if r := env.get(strings.TrimPrefix(gw, env.URL) + "/ledger"); r.Status != http.StatusOK || json.Unmarshal(r.Body, &l) != nil || l.Charges != 1 {
				t.Errorf("%s's gateway after one charge: %d %s, want 1 charge", name, r.Status, r.Body)
			}
			if status != http.StatusCreated || took < latency+hold {
				t.Errorf("%s's charge: %d after %s, want a 201 no sooner than the latency and the hold (%s)", name, status, took, latency+hold)
			}
		}()
	}
	wg.Wait()
	var b WorkshopBoard
	env.decodeGet(workshopAPI, &b)
	if b.Faults.LatencyMS != int(latency.Milliseconds()) || b.Faults.HoldAnswerMS != int(hold.Milliseconds()) {
		t.Errorf("the workshop's faults read back: %+v", b.Faults)
	}
}

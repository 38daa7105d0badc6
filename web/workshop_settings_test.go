package web

import (
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"paytwice/sim"
	"paytwice/web/workshop"
)

// TestWorkshopSettingsReachEveryServerAtOnce: two servers share one store
// (PostgreSQL with PAYTWICE_TEST_POSTGRES, SharedMemory peers without).
// The presenter opens the workshop and then flips the gateways' faults on
// the first server; the second server, which saves nothing and draws no
// board meanwhile (the reads that used to be its only way to learn of
// them), takes each change when it is announced: it opens, and the
// gateway of a student registered on it drops a charge's first answer;
// the networks the presenter allows on the first server are the ones the
// second calls.
func TestWorkshopSettingsReachEveryServerAtOnce(t *testing.T) {
	waitsOnRealClocks(t)
	const presenter = "teach-announce"
	c := newClass(t)
	cfg := Config{WorkshopAllow: workshopStudentNets, PresenterToken: presenter}
	a, b := c.server(cfg, nil), c.server(cfg, nil)
	for _, e := range []*testEnv{a, b} {
		waitUntil(t, "the relay to listen", func() bool { return e.Server.servers.relay.Listening() > 0 })
	}
	send := func(base, method, path, body string, headers ...string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer res.Body.Close()
		out, _ := io.ReadAll(res.Body)
		return res.StatusCode, out
	}
	// within waits, bounded, for what the second server's workshop holds
	// in memory: reading it so reads nothing from the store.
	within := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("after 30 s the second server still has not %s", what)
			}
		}
	}

	if code, out := send(a.URL, http.MethodPut, workshopAPI, `{"on": true}`, PresenterHeader, presenter); code != http.StatusOK {
		t.Fatalf("opening the workshop on the first server: %d %s", code, out)
	}
	within("opened the workshop", b.Server.endpoints.workshop.On)

	cat := "cat-" + hex.EncodeToString(randomBytes(8))
	var me WorkshopStudent
	if code, out := send(b.URL, http.MethodPost, workshopAPI+"/endpoint", `{"name": "Cat", "url": "http://127.0.0.2:8000"}`,
		"Authorization", "Bearer "+cat); code != http.StatusOK || json.Unmarshal(out, &me) != nil {
		t.Fatalf("registering Cat on the second server: %d %s", code, out)
	}
	// Cat's registration is the second server's last change: let its save
	// go by, so that what follows cannot ride on it.
	within("saved Cat", func() bool {
		_, out := send(a.URL, http.MethodGet, workshopAPI, "")
		return strings.Contains(string(out), `"Cat"`)
	})

	want := sim.GatewayBaseFaults{LatencyMS: 30, DropFirstAnswer: true}
	if code, out := send(a.URL, http.MethodPut, workshopAPI, `{"faults": {"latency_ms": 30, "drop_first_answer": true}}`, PresenterHeader, presenter); code != http.StatusOK {
		t.Fatalf("changing the faults on the first server: %d %s", code, out)
	}
	within("taken the new faults", func() bool { return b.Server.endpoints.workshop.Scoreboard().Faults == want })

	if code, out := send(a.URL, http.MethodPut, workshopAPI, `{"faults": {"latency_ms": 30, "drop_first_answer": true}, "allowed": ["127.0.0.3"]}`,
		PresenterHeader, presenter); code != http.StatusOK {
		t.Fatalf("changing the networks on the first server: %d %s", code, out)
	}
	wantNets := []workshop.Allow{{Net: netip.MustParsePrefix("127.0.0.3/32")}}
	within("taken the new networks", func() bool { return slices.Equal(b.Server.endpoints.guard.Allowed(), wantNets) })
	if code, out := send(b.URL, http.MethodPost, workshopAPI+"/endpoint", `{"name": "Dan", "url": "http://127.0.0.2:8000"}`,
		"Authorization", "Bearer dan-"+hex.EncodeToString(randomBytes(8))); code != http.StatusForbidden {
		t.Errorf("registering at 127.0.0.2 on the second server, once the presenter allowed only 127.0.0.3: %d %s, want 403", code, out)
	}
	var boardB WorkshopBoard
	if code, out := send(b.URL, http.MethodGet, workshopAPI, ""); code != http.StatusOK || json.Unmarshal(out, &boardB) != nil ||
		!slices.Equal(boardB.Allowed, []string{"127.0.0.3/32"}) {
		t.Errorf("the second server's board: %d %s, want the networks allowed [127.0.0.3/32]", code, out)
	}

	// Cat's gateway, on the second server, drops a charge's first answer.
	// A body it cannot read twice: the client does not send it again when
	// the connection closes with no answer.
	charge, _ := http.NewRequest(http.MethodPost, me.Gateway+"/charges", io.MultiReader(strings.NewReader(`{"order_id": "o-1", "amount": 100}`)))
	charge.Header.Set("Content-Type", "application/json")
	charge.Header.Set("Idempotency-Key", "k-"+hex.EncodeToString(randomBytes(8)))
	if res, err := http.DefaultClient.Do(charge); err == nil {
		res.Body.Close()
		t.Errorf("a charge on Cat's gateway on the second server: %d, want its first answer dropped", res.StatusCode)
	}
}

package web

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"paytwice/web/room"
)

// heldWorkshopRead is peers whose reads of the kept workshop fail, as a
// store that does not answer would, until released.
type heldWorkshopRead struct {
	room.Peers
	released chan struct{}
}

func (p *heldWorkshopRead) LoadWorkshop(ctx context.Context) ([]byte, error) {
	select {
	case <-p.released:
		return p.Peers.LoadWorkshop(ctx)
	default:
		return nil, errors.New("the store does not answer")
	}
}

// TestWorkshopGatewayWaitsForTheKeptWorkshop: a server that has not yet
// read the kept workshop answers a kept student's gateway 503
// problem+json with Retry-After ("the room is starting"), not a 404 that
// tells the student to copy the address again; once it has read it, the
// same charge is taken. Without the 503 the answer was 404.
func TestWorkshopGatewayWaitsForTheKeptWorkshop(t *testing.T) {
	waitsOnRealClocks(t)
	const presenter = "teach-starting"
	c := newClass(t)
	cfg := Config{WorkshopAllow: workshopStudentNets, PresenterToken: presenter}
	a := c.server(cfg, nil)
	openWorkshop(t, a.URL, presenter, `{"on": true}`)
	cat := registerStudentAt(t, a.URL, "cat-"+hex.EncodeToString(randomBytes(8)), "Cat", "http://127.0.0.2:8000")
	waitUntil(t, "Cat in the kept workshop", func() bool {
		_, out := workshopSend(t, a.URL, http.MethodGet, workshopAPI, "")
		var v WorkshopBoard
		return json.Unmarshal(out, &v) == nil && len(v.Students) == 1
	})

	held := &heldWorkshopRead{released: make(chan struct{})}
	cfg.workshopRestoreWait = 50 * time.Millisecond
	d := c.server(cfg, func(p room.Peers) room.Peers { held.Peers = p; return held })
	path := cat.Gateway[strings.Index(cat.Gateway, workshopGateways):]
	charge := func() response {
		return send(t, noRedirects, http.MethodPost, d.URL+path+"/charges", `{"order_id": "o-1", "amount": 100}`,
			"Content-Type", "application/json", "Idempotency-Key", "k-starting")
	}
	r := charge()
	if r.Status != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" ||
		!strings.HasPrefix(r.Header.Get("Content-Type"), "application/problem+json") || !strings.Contains(string(r.Body), "The room is starting") {
		t.Fatalf("Cat's gateway on a server that has not read the kept workshop: %d %q %s, want 503 problem+json with Retry-After saying the room is starting",
			r.Status, r.Header, r.Body)
	}
	close(held.released)
	waitUntil(t, "Cat's gateway known once the kept workshop is read", func() bool { return charge().Status == http.StatusCreated })
	if r := send(t, noRedirects, http.MethodPost, d.URL+workshopGateways+strings.Repeat("0", 32)+"/charges", `{"order_id": "o-1", "amount": 100}`,
		"Content-Type", "application/json", "Idempotency-Key", "k-nobody"); r.Status != http.StatusNotFound {
		t.Errorf("a gateway nobody registered, once the kept workshop is read: %d %s, want 404", r.Status, r.Body)
	}
}

package web

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"paytwice/sim"
	"paytwice/store/postgres"
	"paytwice/store/postgres/pgtest"
)

// TestWorkshopGatewayBooksSurviveARestart: a student's gateway keeps its
// books in the room's store. After a restart on the same SQLite file, or
// of a server on the same PostgreSQL database, the same key again gets the
// charge it got before (200, same id), an order lists the charges made
// before the restart, and the scoreboard's count of the gateway's charges
// is what the books hold: a gateway whose books started empty would charge
// the key again and count it twice.
func TestWorkshopGatewayBooksSurviveARestart(t *testing.T) {
	const presenter = "teach-books-36"
	cfg := Config{WorkshopAllow: workshopStudentNets, PresenterToken: presenter}
	t.Run("on a SQLite file", func(t *testing.T) {
		r := newRestartable(t, cfg)
		checkGatewayBooksSurvive(t, presenter, r.URL, r.restart)
	})
	t.Run("on PostgreSQL", func(t *testing.T) {
		dbURL := pgtest.NewDatabase(t)
		open := func() (string, func()) {
			clock := sim.NewClock(nil)
			pg, err := postgres.Open(context.Background(), dbURL, postgres.Options{Now: clock.Now, MaxConns: 6})
			if err != nil {
				t.Fatal(err)
			}
			c := cfg
			c.Ledger, c.Peers, c.Logger = pg, pg, log.New(io.Discard, "", 0)
			srv := NewServer(c, pg, clock)
			hs := httptest.NewServer(srv.Handler())
			var once sync.Once
			stop := func() { once.Do(func() { srv.StopHeld(); hs.Close(); srv.Close(); pg.Close() }) }
			t.Cleanup(stop)
			return hs.URL, stop
		}
		base, stop := open()
		checkGatewayBooksSurvive(t, presenter, func() string { return base }, func() {
			stop()
			base, stop = open()
		})
	})
}

func checkGatewayBooksSurvive(t *testing.T, presenter string, base func() string, restart func()) {
	send := func(method, path, body string, out any, headers ...string) int {
		t.Helper()
		req, _ := http.NewRequest(method, base()+path, strings.NewReader(body))
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
		b, _ := io.ReadAll(res.Body)
		if out != nil && json.Unmarshal(b, out) != nil {
			t.Fatalf("%s %s: %d %s", method, path, res.StatusCode, b)
		}
		return res.StatusCode
	}
	if code := send(http.MethodPut, workshopAPI, `{"on": true}`, nil, PresenterHeader, presenter); code != http.StatusOK {
		t.Fatalf("opening the workshop: %d", code)
	}
	students := map[string]string{} // name → token
	paths := map[string]string{}    // name → the gateway's path
	for _, name := range []string{"Cat", "Dan"} {
		students[name] = strings.ToLower(name) + "-" + hex.EncodeToString(randomBytes(8))
		var v WorkshopStudent
		if code := send(http.MethodPost, workshopAPI+"/endpoint", `{"name": "`+name+`", "url": "http://127.0.0.2:8000"}`, &v,
			"Authorization", "Bearer "+students[name]); code != http.StatusOK {
			t.Fatalf("registering %s: %d", name, code)
		}
		u, err := url.Parse(v.Gateway)
		if err != nil {
			t.Fatal(err)
		}
		paths[name] = u.Path
	}
	type charge struct {
		ID, Key, OrderID string
	}
	pay := func(name, key, order string) (int, charge) {
		t.Helper()
		var c struct {
			ID      string `json:"id"`
			Key     string `json:"key"`
			OrderID string `json:"order_id"`
		}
		code := send(http.MethodPost, paths[name]+"/charges", `{"order_id": "`+order+`", "amount": 100}`, &c, "Idempotency-Key", key)
		return code, charge{c.ID, c.Key, c.OrderID}
	}
	listed := func(name, order string) string {
		t.Helper()
		var l struct {
			Charges []struct {
				Key string `json:"key"`
			} `json:"charges"`
		}
		if code := send(http.MethodGet, paths[name]+"/charges?order_id="+order, "", &l); code != http.StatusOK {
			t.Fatalf("listing %s's order %s: %d", name, order, code)
		}
		var keys []string
		for _, c := range l.Charges {
			keys = append(keys, c.Key)
		}
		return strings.Join(keys, " ")
	}
	charges := func(name string) int {
		t.Helper()
		var v WorkshopStudent
		if code := send(http.MethodGet, workshopAPI+"/me", "", &v, "Authorization", "Bearer "+students[name]); code != http.StatusOK {
			t.Fatalf("%s's row: %d", name, code)
		}
		return v.Charges
	}

	before := map[string]charge{}
	for _, p := range []struct{ name, key, order string }{{"Cat", "k1", "O-1"}, {"Cat", "k2", "O-1"}, {"Cat", "k3", "O-2"}, {"Dan", "k1", "O-1"}} {
		code, c := pay(p.name, p.key, p.order)
		if code != http.StatusCreated {
			t.Fatalf("%s's first charge of %s: %d, want 201", p.name, p.key, code)
		}
		before[p.name+p.key] = c
	}
	if before["Catk1"].ID == before["Dank1"].ID {
		t.Fatalf("Cat's and Dan's k1 are one charge %s: their books are apart", before["Catk1"].ID)
	}
	if c, d := charges("Cat"), charges("Dan"); c != 3 || d != 1 {
		t.Fatalf("before the restart the rows count %d and %d charges, want 3 and 1", c, d)
	}

	restart()

	if got := listed("Cat", "O-1"); got != "k1 k2" {
		t.Errorf("after the restart Cat's order O-1 lists %q, want k1 k2", got)
	}
	for _, k := range []struct{ name, key, order string }{{"Cat", "k1", "O-1"}, {"Cat", "k3", "O-2"}, {"Dan", "k1", "O-1"}} {
		code, c := pay(k.name, k.key, k.order)
		if code != http.StatusOK || c != before[k.name+k.key] {
			t.Errorf("after the restart %s's %s again: %d %+v, want 200 and the charge it got before, %+v", k.name, k.key, code, c, before[k.name+k.key])
		}
	}
	if code, _ := pay("Cat", "k4", "O-2"); code != http.StatusCreated {
		t.Errorf("after the restart Cat's new key k4: %d, want 201", code)
	}
	if got := listed("Cat", "O-2"); got != "k3 k4" {
		t.Errorf("after the restart Cat's order O-2 lists %q, want k3 k4", got)
	}
	if c, d := charges("Cat"), charges("Dan"); c != 4 || d != 1 {
		t.Errorf("after the restart the rows count %d and %d charges, want 4 and 1, as the books hold", c, d)
	}
}

package web

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"html"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"paytwice/pay/check"
	"paytwice/sim"
	"paytwice/store/postgres"
	"paytwice/store/postgres/pgtest"
	"paytwice/web/room"
)

// TestWorkshopScoreboardSurvivesARestart: the workshop is kept in the
// room's SQLite file. After a restart on the same file the workshop is
// open with the presenter's faults, a finished run's row (its red double
// charge, its cases, its gateway's charges) is as it was, a hidden row is
// still hidden, the students are known again by their tokens and their
// gateways' addresses, and a run the server stopped in the middle of is
// shown as interrupted: neither passed nor failed.
func TestWorkshopScoreboardSurvivesARestart(t *testing.T) {
	const presenter = "teach-keep-36"
	cfg := Config{WorkshopAllow: workshopStudentNets, PresenterToken: presenter,
		workshopTune: func(c *check.Config) { c.Only = []int{1, 4} }} // short runs: a replay and a storm
	r := newRestartable(t, cfg)
	faults := sim.GatewayBaseFaults{LatencyMS: 20}
	openWorkshop(t, r.URL(), presenter, `{"on": true, "faults": {"latency_ms": 20}}`)
	me := func(token string) WorkshopStudent {
		t.Helper()
		var v WorkshopStudent
		if code := r.call(http.MethodGet, workshopAPI+"/me", "", &v, "Authorization", "Bearer "+token); code != http.StatusOK {
			t.Fatalf("GET %s/me: %d", workshopAPI, code)
		}
		return v
	}
	board := func() WorkshopBoard {
		t.Helper()
		var b WorkshopBoard
		if code := r.call(http.MethodGet, workshopAPI, "", &b); code != http.StatusOK {
			t.Fatalf("GET %s: %d", workshopAPI, code)
		}
		return b
	}
	waitFor := func(token string, done func(WorkshopStudent) bool) WorkshopStudent {
		t.Helper()
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
			if v := me(token); done(v) {
				return v
			} else if time.Now().After(deadline) {
				t.Fatalf("waited 2 minutes: %+v", v)
			}
		}
	}

	// Cat's server has no key table: its finished run shows a double charge.
	cat := "cat-" + hex.EncodeToString(randomBytes(8))
	catAddr := freeAddr(t, "127.0.0.2")
	catView := registerStudentAt(t, r.URL(), cat, "Cat", "http://"+catAddr)
	naiveServer(t, catAddr, catView.Gateway)
	if code := r.call(http.MethodPost, workshopAPI+"/run", "", nil, "Authorization", "Bearer "+cat); code != http.StatusAccepted {
		t.Fatalf("asking for Cat's run: %d", code)
	}
	catBefore := waitFor(cat, func(v WorkshopStudent) bool { return v.State == "done" || v.State == "not run" })
	if catBefore.State != "done" || !doubleCharge.MatchString(catBefore.FirstSafety) || catBefore.Charges == 0 {
		t.Fatalf("Cat's run before the restart: %+v, want a finished run with a double charge", catBefore)
	}

	// Rude is hidden by the presenter.
	registerStudentAt(t, r.URL(), "rude-"+hex.EncodeToString(randomBytes(8)), "Rude", "http://127.0.0.3:8000")
	hideStudent(t, r.URL(), presenter, "Rude")

	// Dan's server takes the run's first request and never answers it:
	// the server stops while his run is under way.
	dan := "dan-" + hex.EncodeToString(randomBytes(8))
	danAddr := freeAddr(t, "127.0.0.4")
	registerStudentAt(t, r.URL(), dan, "Dan", "http://"+danAddr)
	asked := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	ln, err := net.Listen("tcp", danAddr)
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		once.Do(func() { close(asked) })
		select {
		case <-release:
		case <-req.Context().Done():
		}
	})}
	go hs.Serve(ln)
	t.Cleanup(func() { close(release); hs.Close() })
	if code := r.call(http.MethodPost, workshopAPI+"/run", "", nil, "Authorization", "Bearer "+dan); code != http.StatusAccepted {
		t.Fatalf("asking for Dan's run: %d", code)
	}
	select {
	case <-asked:
	case <-time.After(time.Minute):
		t.Fatal("Dan's run never reached his server")
	}
	if v := me(dan); v.State != "running" {
		t.Fatalf("Dan's run while his server holds its request: %+v, want running", v)
	}

	r.restart()

	b := board()
	if !b.On || b.Faults != faults {
		t.Errorf("after the restart the workshop is on=%v with faults %+v, want open with %+v", b.On, b.Faults, faults)
	}
	var names []string
	for _, s := range b.Students {
		names = append(names, s.Name)
	}
	if strings.Join(names, " ") != "Cat Dan" {
		t.Errorf("after the restart the scoreboard shows %v, want Cat and Dan, Rude still hidden", names)
	}
	catAfter := me(cat)
	if catAfter.State != "done" || catAfter.FirstSafety != catBefore.FirstSafety || catAfter.Cases != catBefore.Cases ||
		catAfter.Failed != catBefore.Failed || catAfter.Charges != catBefore.Charges || catAfter.Gateway != catBefore.Gateway {
		t.Errorf("Cat's row after the restart: %+v, want it as it was: %+v", catAfter, catBefore)
	}
	danAfter := me(dan)
	if danAfter.State != "interrupted" || danAfter.Failed != 0 || danAfter.FirstSafety != "" || !strings.Contains(danAfter.Message, "stopped") {
		t.Errorf("Dan's run after the restart: %+v, want interrupted, neither passed nor failed, saying the server stopped", danAfter)
	}
	scores, err := http.Get(r.URL() + "/workshop/-/scores")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(scores.Body)
	scores.Body.Close()
	if !regexp.MustCompile(`data-student="Dan" data-state="interrupted" class="workshop-row warn">[\s\S]*?<span class="badge warn">interrupted</span>`).Match(page) {
		t.Errorf("the scoreboard does not show Dan's run as interrupted: %s", page)
	}
	// His gateway's address still charges (the room knows its secret).
	res, err := http.Post(catAfter.Gateway+"/charges", "application/json", strings.NewReader(`{"order_id": "after-restart", "amount": 100}`))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode == http.StatusNotFound {
		t.Errorf("Cat's gateway address is unknown after the restart")
	}
	// Dan may run again: the interrupted run holds no place.
	if code := r.call(http.MethodPost, workshopAPI+"/run", "", nil, "Authorization", "Bearer "+dan); code != http.StatusAccepted {
		t.Errorf("asking for Dan's run again after the restart: %d, want 202", code)
	}
}

// TestWorkshopScoreboardOnEveryServerOfOnePostgreSQL: two servers share
// one PostgreSQL database, as behind paytwice cluster. The workshop runs
// on the first (the front door sends it every workshop request); the
// second server's board shows the same scoreboard, the red double charge
// with its reason among it, and not the row the presenter hid. The first
// server restarted on the database carries on with the students.
func TestWorkshopScoreboardOnEveryServerOfOnePostgreSQL(t *testing.T) {
	waitsOnRealClocks(t)
	url := pgtest.NewDatabase(t)
	const presenter = "teach-pg-36"
	open := func() (*Server, string) {
		clock := sim.NewClock(nil)
		pg, err := postgres.Open(context.Background(), url, postgres.Options{Now: clock.Now, MaxConns: 6})
		if err != nil {
			t.Fatal(err)
		}
		srv := NewServer(Config{Ledger: pg, Peers: pg, Logger: log.New(io.Discard, "", 0), PresenterToken: presenter,
			WorkshopAllow: workshopStudentNets, workshopTune: func(c *check.Config) { c.Only = []int{1, 4} }}, pg, clock)
		hs := httptest.NewServer(srv.Handler())
		var once sync.Once
		stop := func() { once.Do(func() { srv.StopHeld(); hs.Close(); srv.Close(); pg.Close() }) }
		t.Cleanup(stop)
		return srv, hs.URL
	}
	first, firstURL := open()
	_, secondURL := open()
	openWorkshop(t, firstURL, presenter, `{"on": true}`)
	cat := "cat-" + hex.EncodeToString(randomBytes(8))
	catAddr := freeAddr(t, "127.0.0.2")
	me := registerStudentAt(t, firstURL, cat, "Cat", "http://"+catAddr)
	naiveServer(t, catAddr, me.Gateway)
	registerStudentAt(t, firstURL, "rude-"+hex.EncodeToString(randomBytes(8)), "Rude", "http://127.0.0.3:8000")
	hideStudent(t, firstURL, presenter, "Rude")
	if code, b := workshopSend(t, firstURL, http.MethodPost, workshopAPI+"/run", "", "Authorization", "Bearer "+cat); code != http.StatusAccepted {
		t.Fatalf("asking for Cat's run: %d %s", code, b)
	}
	var done WorkshopStudent
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(50 * time.Millisecond) {
		_, b := workshopSend(t, firstURL, http.MethodGet, workshopAPI+"/me", "", "Authorization", "Bearer "+cat)
		if err := json.Unmarshal(b, &done); err != nil {
			t.Fatal(err)
		}
		if done.State == "done" || done.State == "not run" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Cat's run is still %s after 2 minutes", done.State)
		}
	}
	if done.State != "done" || !doubleCharge.MatchString(done.FirstSafety) {
		t.Fatalf("Cat's run: %+v, want a double charge", done)
	}
	// The second server's board, read until the first server's last save
	// reaches it (bounded).
	var board string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		_, b := workshopSend(t, secondURL, http.MethodGet, "/board", "")
		board = string(b)
		if strings.Contains(board, `data-student="Cat" data-state="done"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the second server's board never shows Cat's finished run: %s", board)
		}
	}
	if !strings.Contains(board, html.EscapeString(done.FirstSafety)) || strings.Contains(board, `data-student="Rude"`) {
		t.Errorf("the second server's board: want Cat's reason %q and no hidden Rude: %s", done.FirstSafety, board)
	}
	var onSecond WorkshopBoard
	_, b := workshopSend(t, secondURL, http.MethodGet, workshopAPI, "")
	if err := json.Unmarshal(b, &onSecond); err != nil || !onSecond.On || len(onSecond.Students) != 1 || onSecond.Students[0].FirstSafety != done.FirstSafety || onSecond.Students[0].Charges != done.Charges {
		t.Errorf("GET %s on the second server: %s, want Cat's row as the first server has it (%+v)", workshopAPI, b, done)
	}

	// The first server restarts on the database: Cat is known again.
	first.StopHeld()
	first.Close()
	_, againURL := open()
	var again WorkshopStudent
	_, b = workshopSend(t, againURL, http.MethodGet, workshopAPI+"/me", "", "Authorization", "Bearer "+cat)
	if err := json.Unmarshal(b, &again); err != nil || again.State != "done" || again.FirstSafety != done.FirstSafety {
		t.Errorf("Cat on the restarted server: %s, want the row as it was (%+v)", b, done)
	}
}

// TestWorkshopServersKeepEachOthersStudents: with several servers on one
// store, each saves its part of the workshop into the kept one. Cat
// registers on the first server; the presenter changes the faults on the
// second, which knows no student itself. Cat stays on both boards, her
// gateway on the first server takes the new faults, and a server started
// afterwards knows her gateway's address. On SharedMemory peers, or on
// PostgreSQL with PAYTWICE_TEST_POSTGRES.
func TestWorkshopServersKeepEachOthersStudents(t *testing.T) {
	waitsOnRealClocks(t)
	const presenter = "teach-merge"
	c := newClass(t)
	cfg := Config{WorkshopAllow: workshopStudentNets, PresenterToken: presenter}
	a := c.server(cfg, nil)
	b := c.server(cfg, nil)
	boardOf := func(base string) WorkshopBoard {
		t.Helper()
		var v WorkshopBoard
		if code, out := workshopSend(t, base, http.MethodGet, workshopAPI, ""); code != http.StatusOK || json.Unmarshal(out, &v) != nil {
			t.Fatalf("GET %s on %s: %d %s", workshopAPI, base, code, out)
		}
		return v
	}
	openWorkshop(t, a.URL, presenter, `{"on": true}`)
	cat := "cat-" + hex.EncodeToString(randomBytes(8))
	me := registerStudentAt(t, a.URL, cat, "Cat", "http://127.0.0.2:8000")
	waitUntil(t, "Cat on the second server's board", func() bool { return len(boardOf(b.URL).Students) == 1 })

	if code, out := workshopSend(t, b.URL, http.MethodPut, workshopAPI, `{"faults": {"drop_first_answer": true}}`, PresenterHeader, presenter); code != http.StatusOK {
		t.Fatalf("changing the faults on the second server: %d %s", code, out)
	}
	waitUntil(t, "the new faults in the kept workshop", func() bool { return boardOf(a.URL).Faults.DropFirstAnswer })
	for _, s := range []*testEnv{a, b} {
		if v := boardOf(s.URL); !v.On || len(v.Students) != 1 || v.Students[0].Name != "Cat" {
			t.Errorf("the board on %s after the faults changed on the second server: %+v, want the workshop open with Cat", s.URL, v)
		}
	}
	// Cat's gateway, on the first server, drops a charge's first answer now.
	// A body it cannot read twice: the client does not send it again
	// when the connection closes with no answer.
	charge, _ := http.NewRequest(http.MethodPost, me.Gateway+"/charges", io.MultiReader(strings.NewReader(`{"order_id": "o-1", "amount": 100}`)))
	charge.Header.Set("Content-Type", "application/json")
	charge.Header.Set("Idempotency-Key", "k-"+hex.EncodeToString(randomBytes(8)))
	res, err := http.DefaultClient.Do(charge)
	if err == nil {
		res.Body.Close()
		t.Errorf("a charge on Cat's gateway after the faults changed: %d, want its first answer dropped", res.StatusCode)
	}

	// A server started now on the store knows Cat and her gateway.
	d := c.server(cfg, nil)
	var again WorkshopStudent
	if code, out := workshopSend(t, d.URL, http.MethodGet, workshopAPI+"/me", "", "Authorization", "Bearer "+cat); code != http.StatusOK || json.Unmarshal(out, &again) != nil || again.Name != "Cat" {
		t.Fatalf("Cat on a server started afterwards: %d %s", code, out)
	}
	if code, out := workshopSend(t, d.URL, http.MethodGet, strings.TrimPrefix(again.Gateway, d.URL)+"/charges?order_id=o-1", ""); code != http.StatusOK {
		t.Errorf("Cat's gateway on a server started afterwards: %d %s", code, out)
	}
	if v := boardOf(d.URL); !v.Faults.DropFirstAnswer {
		t.Errorf("the faults on a server started afterwards: %+v, want the second server's", v.Faults)
	}
}

// slowWorkshopRead is peers whose first read of the kept workshop hangs
// until its caller gives up, as a slow store's would.
type slowWorkshopRead struct {
	room.Peers
	reads  atomic.Int32
	gaveUp chan error // the first read's end
}

func (p *slowWorkshopRead) LoadWorkshop(ctx context.Context) ([]byte, error) {
	if p.reads.Add(1) == 1 {
		<-ctx.Done()
		p.gaveUp <- ctx.Err()
		return nil, ctx.Err()
	}
	return p.Peers.LoadWorkshop(ctx)
}

// TestWorkshopStartsWithoutASlowStore: a server whose store does not
// answer the read of the kept workshop starts all the same once the
// read's bound passes, and reads the workshop again in the background:
// Cat, registered on another server, is known there soon after.
func TestWorkshopStartsWithoutASlowStore(t *testing.T) {
	waitsOnRealClocks(t)
	const presenter = "teach-slow"
	c := newClass(t)
	cfg := Config{WorkshopAllow: workshopStudentNets, PresenterToken: presenter}
	a := c.server(cfg, nil)
	openWorkshop(t, a.URL, presenter, `{"on": true}`)
	cat := "cat-" + hex.EncodeToString(randomBytes(8))
	me := func(base string) int {
		req, _ := http.NewRequest(http.MethodGet, base+workshopAPI+"/me", nil)
		req.Header.Set("Authorization", "Bearer "+cat)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	registerStudentAt(t, a.URL, cat, "Cat", "http://127.0.0.2:8000")
	waitUntil(t, "Cat in the kept workshop", func() bool {
		res, err := http.Get(a.URL + workshopAPI)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var v WorkshopBoard
		return json.NewDecoder(res.Body).Decode(&v) == nil && len(v.Students) == 1
	})

	slow := &slowWorkshopRead{gaveUp: make(chan error, 1)}
	cfg.workshopRestoreWait = 100 * time.Millisecond
	d := c.server(cfg, func(p room.Peers) room.Peers { slow.Peers = p; return slow })
	select {
	case err := <-slow.gaveUp:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("the start's read of the kept workshop ended with %v, want its bound passed", err)
		}
	default:
		t.Fatal("the server started while its read of the kept workshop still hung")
	}
	waitUntil(t, "Cat known on the server started on a slow store", func() bool { return me(d.URL) == http.StatusOK })
}

// workshopSend sends a request to the server at base, its headers given
// as name, value pairs, without following a redirect, and returns the
// answer's status and body.
func workshopSend(t *testing.T, base, method, path, body string, headers ...string) (int, []byte) {
	t.Helper()
	r := send(t, noRedirects, method, base+path, body, headers...)
	return r.Status, r.Body
}

// noRedirects is a client that returns a redirect as the answer.
var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// openWorkshop sets the workshop on the server at base as the presenter
// does (settings is the body of PUT /api/workshop).
func openWorkshop(t *testing.T, base, presenter, settings string) {
	t.Helper()
	if code, out := workshopSend(t, base, http.MethodPut, workshopAPI, settings, PresenterHeader, presenter); code != http.StatusOK {
		t.Fatalf("opening the workshop: %d %s", code, out)
	}
}

// registerStudentAt registers name's endpoint on the server at base under
// the bearer token, as the student's page does, and returns the student's
// own view.
func registerStudentAt(t *testing.T, base, token, name, endpoint string) WorkshopStudent {
	t.Helper()
	var v WorkshopStudent
	code, out := workshopSend(t, base, http.MethodPost, workshopAPI+"/endpoint", `{"name": "`+name+`", "url": "`+endpoint+`"}`, "Authorization", "Bearer "+token)
	if code != http.StatusOK || json.Unmarshal(out, &v) != nil {
		t.Fatalf("registering %s: %d %s", name, code, out)
	}
	return v
}

// hideStudent takes name off the scoreboard on the server at base, through
// the presenter's form.
func hideStudent(t *testing.T, base, presenter, name string) {
	t.Helper()
	if r := send(t, noRedirects, http.MethodPost, base+"/workshop/-/hide", url.Values{"name": {name}}.Encode(),
		"Content-Type", "application/x-www-form-urlencoded", PresenterHeader, presenter); r.Status != http.StatusSeeOther {
		t.Fatalf("hiding %s: %d %s", name, r.Status, r.Body)
	}
}

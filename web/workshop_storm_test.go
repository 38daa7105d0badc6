package web

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"paytwice/pay/check"
)

// checkThenCharge is a student's server that does one request right and
// several at once wrong: it keeps each key's finished answer and replays
// it (the same key with another body is a 422), but it claims nothing
// before it works, so requests that share a key and arrive together all
// miss the table and each charge the gateway with a key of its own.
//
// It tells the test when the storm begins (the first moment two requests
// with one key are in flight), answers the storm's first two charges and
// holds the storm's other answers until the test lets them go
// (releaseStorm), and holds the first request of a later case, one with a
// new key after the storm, until the test lets it go (release).
type checkThenCharge struct {
	gateway string
	client  *http.Client

	mu       sync.Mutex
	answers  map[string][2]string // key → fingerprint, answer
	inFlight map[string]int
	stormKey string
	// storm is closed at the storm's start (stormAt); held when a later
	// case's first request waits on release.
	storm, held, release chan struct{}
	stormAt              time.Time
	heldOnce             sync.Once
	// stormCharged counts the storm's requests that charged; every storm
	// answer but those of the first two charges waits on releaseStorm.
	stormCharged int
	releaseStorm chan struct{}
}

func newCheckThenCharge(gateway string) *checkThenCharge {
	return &checkThenCharge{gateway: gateway, client: &http.Client{Timeout: 30 * time.Second},
		answers: map[string][2]string{}, inFlight: map[string]int{},
		storm: make(chan struct{}), held: make(chan struct{}), release: make(chan struct{}), releaseStorm: make(chan struct{})}
}

// holdStormAnswer holds an answer to the storm, a charge (fresh) or a
// replay, unless it is one of the storm's first two charges, until the
// test lets them go (or gives up).
func (s *checkThenCharge) holdStormAnswer(scoped string, fresh bool) {
	s.mu.Lock()
	storm := scoped == s.stormKey
	if storm && fresh {
		s.stormCharged++
	}
	hold := storm && (!fresh || s.stormCharged > 2)
	s.mu.Unlock()
	if hold {
		select {
		case <-s.releaseStorm:
		case <-time.After(2 * time.Minute):
		}
	}
}

func (s *checkThenCharge) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var p struct {
		OrderID string `json:"order_id"`
		Amount  int64  `json:"amount_satang"`
	}
	key := r.Header.Get("Idempotency-Key")
	body, _ := io.ReadAll(io.LimitReader(r.Body, 4096))
	if r.Method != http.MethodPost || key == "" || json.Unmarshal(body, &p) != nil || p.OrderID == "" || p.Amount <= 0 {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"title":"bad request","status":400}`)
		return
	}
	scoped := r.Header.Get("Authorization") + "\n" + key
	fp := fmt.Sprintf("%q %d", p.OrderID, p.Amount)
	s.mu.Lock()
	s.inFlight[scoped]++
	if s.inFlight[scoped] == 2 && s.stormKey == "" {
		s.stormKey, s.stormAt = scoped, time.Now()
		close(s.storm)
	}
	later := s.stormKey != "" && scoped != s.stormKey && s.inFlight[scoped] == 1
	saved, seen := s.answers[scoped]
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inFlight[scoped]--
		s.mu.Unlock()
	}()
	if later {
		s.heldOnce.Do(func() {
			close(s.held)
			select { // bounded: the test lets it go, or gives up
			case <-s.release:
			case <-time.After(2 * time.Minute):
			}
		})
	}
	switch {
	case seen && saved[0] != fp:
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusUnprocessableEntity)
		io.WriteString(w, `{"title":"this key was used for another payment","status":422}`)
		return
	case seen:
		s.holdStormAnswer(scoped, false)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Idempotent-Replayed", "true")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, saved[1])
		return
	}
	// The mistake: nothing was claimed, so everyone who looked and found
	// nothing charges, each with a key of its own.
	b, _ := json.Marshal(map[string]any{"order_id": p.OrderID, "amount": p.Amount})
	req, _ := http.NewRequest(http.MethodPost, s.gateway+"/charges", bytes.NewReader(b))
	req.Header.Set("Idempotency-Key", rand.Text())
	res, err := s.client.Do(req)
	if err != nil {
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	var ch struct{ ID string }
	_ = json.NewDecoder(res.Body).Decode(&ch)
	res.Body.Close()
	answer := fmt.Sprintf(`{"charge_id":%q,"status":"paid"}`, ch.ID)
	s.mu.Lock()
	s.answers[scoped] = [2]string{fp, answer}
	s.mu.Unlock()
	s.holdStormAnswer(scoped, true)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	io.WriteString(w, answer)
}

// TestWorkshopStormShowsRedWhileTheRunGoesOn: a server that answers
// one request at a time correctly (it passes the replay and the other
// body) but has no claim double-charges in the storm of one key. The
// scoreboard the board fetches shows the row red, with the storm's
// one-line reason, as soon as two of the storm's answers name two
// charges: the student's server holds the storm's other answers until
// the red is seen, so the red cannot wait for the storm's slowest answer
// (it used to: on a loaded machine the storm's 20 charges, written one
// after another, took seconds). The storm's verdict then follows with the
// whole storm's tally, while the next case's first request is held. The
// time from the storm's start to the red on the scoreboard is logged (not
// asserted).
func TestWorkshopStormShowsRedWhileTheRunGoesOn(t *testing.T) {
	waitsOnRealClocks(t) // the checker's run on a server of its own, its storm held by the test
	env := newTestEnv(t, Config{WorkshopAllow: workshopStudentNets, workshopTune: func(c *check.Config) {
		c.Only = []int{1, 2, 4, 5}
		c.Timeout = 3 * time.Minute // the held requests wait on the test, not on the clock
	}})
	if r := env.send(http.MethodPut, workshopAPI, WorkshopSettings{On: &workshopOpen}); r.Status != http.StatusOK {
		t.Fatalf("opening the workshop: %d %s", r.Status, r.Body)
	}
	addr := freeAddr(t, "127.0.0.2")
	token := "eve-" + hex.EncodeToString(randomBytes(8))
	me := registerStudent(t, env, token, "Eve", "http://"+addr)
	student := newCheckThenCharge(me.Gateway)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: student}
	go hs.Serve(ln)
	var releaseOnce, stormOnce sync.Once
	letGo := func() { releaseOnce.Do(func() { close(student.release) }) }
	letStormGo := func() { stormOnce.Do(func() { close(student.releaseStorm) }) }
	t.Cleanup(func() { letStormGo(); letGo(); hs.Close() })

	if r := env.send(http.MethodPost, workshopAPI+"/run", nil, "Authorization", "Bearer "+token); r.Status != http.StatusAccepted {
		t.Fatalf("asking for a run: %d %s", r.Status, r.Body)
	}
	select {
	case <-student.storm:
	case <-time.After(2 * time.Minute):
		t.Fatalf("the storm never reached the student's server: %+v", boardRow(t, env, "Eve"))
	}
	red := regexp.MustCompile(`data-student="Eve" data-state="running" class="workshop-row bad"[\s\S]*?<td class="workshop-reason bad">(case 4, storm of one key: [^<]*)</td>`)
	var reason string
	var seenAt time.Time
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(5 * time.Millisecond) {
		page := env.get("/workshop/-/scores")
		if m := red.FindSubmatch(page.Body); m != nil {
			seenAt, reason = time.Now(), html.UnescapeString(string(m[1]))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no red storm row on the scoreboard 2 minutes after the storm, its answers past the second held: %s", page.Body)
		}
	}
	t.Logf("the storm began at the student's server; %d ms later the scoreboard showed it red: %s",
		seenAt.Sub(student.stormAt).Milliseconds(), reason)
	twice := regexp.MustCompile(`[2-9]\d* (charges|effects|payments)`)
	if !twice.MatchString(reason) {
		t.Errorf("the storm's reason %q does not say one action was charged more than once", reason)
	}
	// The storm's other answers are still held: its case is not decided.
	if row := boardRow(t, env, "Eve"); row.Cases != 2 || row.Passed != 2 || row.Failed != 0 || row.State != "running" || row.FirstSafety != reason {
		t.Errorf("while the storm's answers are held the row is %+v, want the replay and the other body passed, the storm red but not yet counted", row)
	}
	letStormGo()
	// The run goes on to the next case, whose first request waits at the
	// student's server: the storm's verdict is in, that case's is not.
	select {
	case <-student.held:
	case <-time.After(2 * time.Minute):
		t.Fatal("the next case's first request never reached the student's server")
	}
	row := boardRow(t, env, "Eve")
	if row.Cases != 3 || row.Passed != 2 || row.Failed != 1 || row.State != "running" {
		t.Errorf("while the next case's request is held the row is %+v, want 3 cases decided (replay and other body passed, the storm failed), the run going on", row)
	}
	if !strings.HasPrefix(row.FirstSafety, "case 4, storm of one key: ") || !twice.MatchString(row.FirstSafety) {
		t.Errorf("the storm's verdict left the first safety failure %q, want the storm's, with its tally", row.FirstSafety)
	}
	letGo()
	final := waitStudent(t, env, token)
	if final.State != "done" || final.FirstSafety != row.FirstSafety {
		t.Errorf("the finished run: %+v, want its first safety failure kept: %q", final, row.FirstSafety)
	}
}

// TestWorkshopRedReachesTheBoardOverItsStream: the board's scoreboard is
// not polled; the board's event stream says when it changed. A reader of
// the stream, as the board's script does, asks for the scoreboard after
// each frame with the workshop mark and nothing else: the student's row
// turns red with the storm's reason while the storm's other answers are
// still held, the mark coming after the red was known.
func TestWorkshopRedReachesTheBoardOverItsStream(t *testing.T) {
	waitsOnRealClocks(t) // the checker's run on a server of its own, its storm held by the test
	env := newTestEnv(t, Config{WorkshopAllow: workshopStudentNets, workshopTune: func(c *check.Config) {
		c.Only = []int{1, 2, 4, 5}
		c.Timeout = 3 * time.Minute // the held requests wait on the test, not on the clock
	}})
	if r := env.send(http.MethodPut, workshopAPI, WorkshopSettings{On: &workshopOpen}); r.Status != http.StatusOK {
		t.Fatalf("opening the workshop: %d %s", r.Status, r.Body)
	}
	addr := freeAddr(t, "127.0.0.2")
	token := "ada-" + hex.EncodeToString(randomBytes(8))
	me := registerStudent(t, env, token, "Ada", "http://"+addr)
	student := newCheckThenCharge(me.Gateway)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: student}
	go hs.Serve(ln)
	var releaseOnce, stormOnce sync.Once
	letGo := func() { releaseOnce.Do(func() { close(student.release) }) }
	letStormGo := func() { stormOnce.Do(func() { close(student.releaseStorm) }) }
	t.Cleanup(func() { letStormGo(); letGo(); hs.Close() })

	stream := openStream(t, env, "")
	if r := env.send(http.MethodPost, workshopAPI+"/run", nil, "Authorization", "Bearer "+token); r.Status != http.StatusAccepted {
		t.Fatalf("asking for a run: %d %s", r.Status, r.Body)
	}
	red := regexp.MustCompile(`data-student="Ada" data-state="running" class="workshop-row bad"[\s\S]*?<td class="workshop-reason bad">case 4, storm of one key: `)
	marks := 0
	for {
		// Bounded by the stream's own bound (waitUntilBound): a board
		// that is never told fails here.
		f := stream.nextFrame()
		if !strings.Contains(f.Data, "<!--workshop-->") {
			continue
		}
		marks++
		if page := env.get("/workshop/-/scores"); red.Match(page.Body) {
			break
		}
	}
	select {
	case <-student.storm:
	default:
		t.Fatal("the row was red before the storm reached the student's server")
	}
	t.Logf("red after %d frames with the workshop mark, %d ms after the storm began", marks, time.Since(student.stormAt).Milliseconds())
	if strings.Contains(string(env.get("/board").Body), `hx-trigger="every`) {
		t.Error("the board still polls the scoreboard")
	}
	letStormGo()
	letGo()
	waitStudent(t, env, token)
}

package web

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"

	"paytwice/pay"
	"paytwice/web/room"
)

// send makes a request with a JSON body (nil for none) and headers as
// name, value pairs.
// asPresenter sends, as send does, with the presenter's header for token.
func (e *testEnv) asPresenter(token string) func(method, path string, body any) response {
	return func(method, path string, body any) response {
		e.t.Helper()
		return e.send(method, path, body, PresenterHeader, token)
	}
}

func (e *testEnv) send(method, path string, body any, headers ...string) response {
	e.t.Helper()
	var rd *bytes.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			e.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, err := http.NewRequest(method, e.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	r, err := do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

// putLab sets every lab switch through the JSON API.
func (e *testEnv) putLab(l room.LabSettings) {
	e.t.Helper()
	if r := e.send(http.MethodPut, "/api/lab", l); r.Status != http.StatusOK {
		e.t.Fatalf("PUT /api/lab: %d %s", r.Status, r.Body)
	}
}

// outcomes reads what the lab measured, through the JSON API.
func (e *testEnv) outcomes() LabOutcomes {
	e.t.Helper()
	r := e.get("/api/lab/outcomes")
	var o LabOutcomes
	if r.Status != http.StatusOK || json.Unmarshal(r.Body, &o) != nil {
		e.t.Fatalf("GET /api/lab/outcomes: %d %s", r.Status, r.Body)
	}
	return o
}

// burst sends n requests with one key at once and returns their statuses.
func (e *testEnv) burst(n int, key, body string) []response {
	e.t.Helper()
	out := make([]response, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			r, err := e.tryPay(key, body)
			if err != nil {
				r = response{Status: 0, Body: []byte(err.Error())}
			}
			out[i] = r
		}()
	}
	close(start)
	wg.Wait()
	return out
}

func countStatus(rs []response, status int) int {
	n := 0
	for _, r := range rs {
		if r.Status == status {
			n++
		}
	}
	return n
}

func statusList(rs []response) string {
	var out []string
	for _, r := range rs {
		out = append(out, fmt.Sprint(r.Status))
	}
	return strings.Join(out, " ")
}

// TestLabMistakeNoKey: a double-click under a delay. With no key the
// server runs both and charges twice; with the real protocol the second
// click waits its turn (409) and one charge is made.
func TestLabMistakeNoKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		mode room.LabMode
		want int
	}{
		{"without a key the server charges both clicks", room.LabNoKey, 2},
		{"with the real protocol the second click is refused and one charge is made", room.LabCorrect, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newTestEnv(t, Config{})
			env.putLab(room.LabSettings{Server: room.LabServer{Mode: tc.mode}})
			setFaults(t, env, pay.ServerFaults{DelayMS: 300})
			rs := env.burst(2, uuid.NewString(), `{"order_id":"A-1001","amount_satang":129900}`)
			if n := env.charges(); n != tc.want {
				t.Fatalf("answers %s; %d charges, want %d", statusList(rs), n, tc.want)
			}
			o := env.outcomes()
			if tc.mode == room.LabNoKey {
				if countStatus(rs, http.StatusCreated) != 2 {
					t.Fatalf("answers %s, want two 201s", statusList(rs))
				}
				if o.NoKey.ChargedTwice != 1 || o.NoKey.ExtraCharges != 1 || o.NoKey.Twice[0] != "A-1001" {
					t.Fatalf("the lab measured %+v, want A-1001 charged twice", o.NoKey)
				}
				// The charges are marked as the lab's own, under keys no
				// client can send.
				list := env.get(paymentsPath + "?order_id=A-1001")
				if !bytes.Contains(list.Body, []byte(`"paid":true`)) {
					t.Fatalf("look-up: %s", list.Body)
				}
				ch, err := env.DB.RecentCharges(context.Background(), 10)
				if err != nil {
					t.Fatal(err)
				}
				for _, c := range ch {
					if !strings.HasPrefix(c.Key, pay.LabKeyPrefix+"no-key rq_") {
						t.Errorf("charge %s is filed under %q, want a lab no-key key", c.ID, c.Key)
					}
				}
			} else if o.NoKey.Charges != 0 || o.ExtraCharges != 0 {
				t.Fatalf("the lab measured %+v, want nothing", o)
			}
		})
	}
}

// TestLabMistakeCheckThenInsert: a burst of requests with one key. When
// the server SELECTs before it INSERTs into tables with no constraints,
// several of them charge. With the constraints back and the same code,
// the losers get an error from the primary key and one charge is made. The
// real protocol makes one charge too.
func TestLabMistakeCheckThenInsert(t *testing.T) {
	t.Parallel()
	const n = 10
	body := `{"order_id":"A-3003","amount_satang":129900}`

	t.Run("without constraints the check lets several requests charge", func(t *testing.T) {
		env := newTestEnv(t, Config{})
		env.putLab(room.LabSettings{Server: room.LabServer{Mode: room.LabCheckThenInsert, CheckGapMS: 300}})
		key := uuid.NewString()
		rs := env.burst(n, key, body)
		loose, err := env.DB.LabLooseCharges(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(loose) < 2 {
			t.Fatalf("answers %s; %d charges for one key in the unguarded table, want more than one", statusList(rs), len(loose))
		}
		for _, c := range loose {
			if c.Key != key {
				t.Fatalf("a charge under %q, want %q", c.Key, key)
			}
		}
		if countStatus(rs, http.StatusCreated) < len(loose) {
			t.Fatalf("answers %s for %d charges", statusList(rs), len(loose))
		}
		o := env.outcomes().CheckThenInsert
		if o.ChargedTwice != 1 || o.Charges != len(loose) || o.ExtraCharges != len(loose)-1 || o.KeyRows < len(loose) {
			t.Fatalf("the lab measured %+v for %d charges", o, len(loose))
		}
		// The same key afterwards: the check finds a done row and replays.
		if r := env.pay(key, body); r.Status != http.StatusCreated || r.Header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("a later retry: %d, replayed %q", r.Status, r.Header.Get("Idempotent-Replayed"))
		}
		// A customer who looks the order up is told every charge the
		// mistake made, not "not paid".
		got := env.get("/v1/payments?order_id=A-3003").JSON(t)
		if list, _ := got["charges"].([]any); len(list) != len(loose) || got["paid"] != true {
			t.Fatalf("the look-up lists %d charges (paid %v), the unguarded table holds %d", len(list), got["paid"], len(loose))
		}
	})
	t.Run("with the constraints back the losers get an error, not a charge", func(t *testing.T) {
		env := newTestEnv(t, Config{})
		env.putLab(room.LabSettings{Server: room.LabServer{Mode: room.LabCheckThenInsertConstrained, CheckGapMS: 300}})
		key := uuid.NewString()
		rs := env.burst(n, key, body)
		if c := env.charges(); c != 1 {
			t.Fatalf("answers %s; %d charges, want 1", statusList(rs), c)
		}
		refused := 0
		for _, r := range rs {
			if r.Status == http.StatusInternalServerError && bytes.Contains(r.Body, []byte("UNIQUE constraint failed")) {
				refused++
			}
		}
		o := env.outcomes().CheckThenInsert
		if refused == 0 || int64(refused) != o.ConstraintRefusals || countStatus(rs, http.StatusCreated)+refused+countStatus(rs, http.StatusConflict) != n {
			t.Fatalf("answers %s; %d refused by the constraint, the lab counted %d", statusList(rs), refused, o.ConstraintRefusals)
		}
		if o.Charges != 0 || o.ChargedTwice != 0 {
			t.Fatalf("the unguarded tables were used: %+v", o)
		}
	})
	t.Run("the real protocol claims with one INSERT and charges once", func(t *testing.T) {
		env := newTestEnv(t, Config{})
		rs := env.burst(n, uuid.NewString(), body)
		if c := env.charges(); c != 1 {
			t.Fatalf("answers %s; %d charges, want 1", statusList(rs), c)
		}
	})
}

// TestLabMistakePruningTooSoon: with keys kept one minute, a retry two
// minutes later is a new payment; with keys kept a day, it is replayed.
func TestLabMistakePruningTooSoon(t *testing.T) {
	t.Parallel()
	body := `{"order_id":"A-7007","amount_satang":129900}`
	for _, tc := range []struct {
		name      string
		retention int64
		pruned    int
		charges   int
	}{
		{"keys kept shorter than the retry window: the late retry charges again", 60, 1, 2},
		{"keys kept longer than the retry window: the late retry is replayed", 24 * 3600, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newTestEnv(t, Config{})
			env.putLab(room.LabSettings{Server: room.LabServer{Mode: room.LabKeyTableOnly, RetentionSeconds: tc.retention}})
			key := uuid.NewString()
			first := env.pay(key, body)
			if first.Status != http.StatusCreated {
				t.Fatalf("first payment: %d %s", first.Status, first.Body)
			}
			if r := env.send(http.MethodPost, "/api/clock/advance", map[string]int{"seconds": 120}); r.Status != http.StatusOK {
				t.Fatalf("clock: %d %s", r.Status, r.Body)
			}
			r := env.send(http.MethodPost, "/api/lab/prune", nil)
			var rep LabPruneReport
			if r.Status != http.StatusOK || json.Unmarshal(r.Body, &rep) != nil || rep.Pruned != tc.pruned || rep.RetentionSeconds != tc.retention {
				t.Fatalf("prune: %d %s, want %d pruned with retention %d", r.Status, r.Body, tc.pruned, tc.retention)
			}
			late := env.pay(key, body)
			replayed := late.Header.Get("Idempotent-Replayed") == "true"
			if late.Status != http.StatusCreated || replayed != (tc.pruned == 0) {
				t.Fatalf("late retry: %d, replayed %v", late.Status, replayed)
			}
			if n := env.charges(); n != tc.charges {
				t.Fatalf("%d charges, want %d", n, tc.charges)
			}
			o := env.outcomes().PruneTooSoon
			if o.ChargedTwice != tc.charges-1 || o.Pruned != int64(tc.pruned) {
				t.Fatalf("the lab measured %+v", o)
			}
		})
	}
	t.Run("the real endpoint's second guards still stop the money", func(t *testing.T) {
		// Outside the lab's mode, charges are UNIQUE per key and the
		// gateway is idempotent by the key, so even a pruned key cannot
		// charge twice.
		env := newTestEnv(t, Config{})
		env.putLab(room.LabSettings{Server: room.LabServer{Mode: room.LabCorrect, RetentionSeconds: 60}})
		key := uuid.NewString()
		first := env.pay(key, body)
		env.send(http.MethodPost, "/api/clock/advance", map[string]int{"seconds": 120})
		env.send(http.MethodPost, "/api/lab/prune", nil)
		late := env.pay(key, body)
		if n := env.charges(); n != 1 {
			t.Fatalf("late retry %d; %d charges, want 1", late.Status, n)
		}
		if late.Status != http.StatusCreated || !bytes.Equal(late.Body, first.Body) {
			t.Fatalf("the late retry answered %d %s, want the first charge's 201 %s", late.Status, late.Body, first.Body)
		}
	})
}

// TestLabMistakePersonalDataAsKey: an e-mail address as the key is
// accepted and flagged, and the lab finds it in every place keys go.
func TestLabMistakePersonalDataAsKey(t *testing.T) {
	t.Parallel()
	body := `{"order_id":"A-6006","amount_satang":129900}`
	t.Run("an e-mail address is accepted, flagged and found everywhere", func(t *testing.T) {
		env := newTestEnv(t, Config{})
		const email = "somchai.j@example.com"
		if r := env.pay(email, body); r.Status != http.StatusCreated {
			t.Fatalf("pay: %d %s", r.Status, r.Body)
		}
		// The customer's next order collides with the first.
		if r := env.pay(email, `{"order_id":"A-6007","amount_satang":129900}`); r.Status != http.StatusUnprocessableEntity {
			t.Fatalf("the second order under the same e-mail: %d, want 422", r.Status)
		}
		o := env.outcomes().PersonalDataKey
		if o.Keys != 1 || o.Requests != 2 || o.Stored[pay.WhereKeyTable] != 1 || o.Stored[pay.WhereCharges] != 1 ||
			o.Stored[pay.WhereGateway] != 1 || o.TimelineEvents < 3 {
			t.Fatalf("the lab found %+v", o)
		}
		flags := 0
		for _, e := range env.Server.Hub().Recent(100) {
			if e.Kind == labKind && e.Key == email && strings.Contains(e.Message, "an e-mail address") {
				flags++
			}
		}
		if flags != 1 {
			t.Fatalf("%d flag events for the key, want 1", flags)
		}
		if exp := env.get("/api/timeline.csv"); !bytes.Contains(exp.Body, []byte(email)) {
			t.Fatalf("the export does not show where the key went: %s", exp.Body)
		}
	})
	t.Run("a random key is not flagged", func(t *testing.T) {
		env := newTestEnv(t, Config{})
		env.pay(uuid.NewString(), body)
		if o := env.outcomes().PersonalDataKey; o.Keys != 0 || o.Requests != 0 || o.Stored[pay.WhereKeyTable] != 0 || o.TimelineEvents != 0 {
			t.Fatalf("the lab found %+v", o)
		}
	})
}

func TestLabSwitchesAPI(t *testing.T) {
	waitsOnRealClocks(t)
	t.Run("PATCH changes one switch, publishes it and leaves the rest", func(t *testing.T) {
		env := newTestEnv(t, Config{})
		r := env.send(http.MethodPatch, "/api/lab", map[string]any{"client": map[string]any{"retry_every_4xx": true}})
		var got room.LabSettings
		if r.Status != http.StatusOK || json.Unmarshal(r.Body, &got) != nil {
			t.Fatalf("PATCH: %d %s", r.Status, r.Body)
		}
		want := room.DefaultLabSettings()
		want.Client.RetryEvery4xx = true
		if got != want || env.Server.lab.Settings() != want {
			t.Fatalf("settings %+v, want %+v", got, want)
		}
		if es := env.Server.Hub().Recent(5); es[len(es)-1].Kind != labKind || !strings.Contains(es[len(es)-1].Message, "client.retry_every_4xx on") {
			t.Fatalf("last event %+v", es[len(es)-1].Event)
		}
	})
	for _, tc := range []struct{ name, body, field string }{
		{"an unknown mode is refused", `{"server":{"mode":"sometimes"}}`, "server.mode"},
		{"a pause over five seconds is refused", `{"server":{"check_gap_ms":9000}}`, "server.check_gap_ms"},
		{"a negative retention is refused", `{"server":{"retention_seconds":-1}}`, "server.retention_seconds"},
		{"an unknown field is refused", `{"client":{"be_careless":true}}`, "be_careless"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newTestEnv(t, Config{})
			req, _ := http.NewRequest(http.MethodPatch, env.URL+"/api/lab", strings.NewReader(tc.body))
			req.Header.Set("Content-Type", "application/json")
			r, err := do(req)
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != http.StatusBadRequest || !bytes.Contains(r.Body, []byte(tc.field)) {
				t.Fatalf("%d %s, want a 400 naming %s", r.Status, r.Body, tc.field)
			}
			if env.Server.lab.Settings() != room.DefaultLabSettings() {
				t.Fatalf("a refused change changed the lab: %+v", env.Server.lab.Settings())
			}
		})
	}
	t.Run("a student without the token cannot change the lab, prune, or start a lesson", func(t *testing.T) {
		env := newTestEnv(t, Config{PresenterToken: "t0k"})
		for _, r := range []response{
			env.send(http.MethodPut, "/api/lab", room.LabSettings{Server: room.LabServer{Mode: room.LabNoKey}}),
			env.send(http.MethodPatch, "/api/lab", map[string]any{"server": map[string]any{"mode": "no_key"}}),
			env.send(http.MethodPost, "/api/lab/prune", nil),
			env.send(http.MethodPut, "/api/lessons/current", LessonChange{Slug: "no-key"}),
		} {
			if r.Status != http.StatusForbidden {
				t.Fatalf("%d %s, want 403", r.Status, r.Body)
			}
		}
		if r := env.send(http.MethodPatch, "/api/lab", map[string]any{"server": map[string]any{"mode": "no_key"}}, PresenterHeader, "t0k"); r.Status != http.StatusOK {
			t.Fatalf("the presenter's change: %d %s", r.Status, r.Body)
		}
		if r := env.get("/api/lab"); !bytes.Contains(r.Body, []byte(`"mode":"no_key"`)) {
			t.Fatalf("GET /api/lab is open and shows the change: %s", r.Body)
		}
	})
	t.Run("a reset turns every mistake off and empties the lab's tables", func(t *testing.T) {
		env := newTestEnv(t, Config{})
		env.putLab(room.LabSettings{Server: room.LabServer{Mode: room.LabCheckThenInsert}, Client: room.LabClient{NewKeyPerRetry: true}})
		env.pay(uuid.NewString(), `{"order_id":"A-1","amount_satang":100}`)
		env.send(http.MethodPut, "/api/lessons/current", LessonChange{Slug: "no-key"})
		env.putLab(room.LabSettings{Server: room.LabServer{Mode: room.LabCheckThenInsert}})
		env.pay(uuid.NewString(), `{"order_id":"A-1","amount_satang":100}`)
		if r := env.send(http.MethodPost, "/api/reset", nil); r.Status != http.StatusOK {
			t.Fatalf("reset: %d", r.Status)
		}
		if env.Server.lab.Settings() != room.DefaultLabSettings() || env.Server.guidedLessons().current() != "" {
			t.Fatalf("after a reset: lab %+v, lesson %q", env.Server.lab.Settings(), env.Server.guidedLessons().current())
		}
		if loose, _ := env.DB.LabLooseCharges(context.Background()); len(loose) != 0 {
			t.Fatalf("%d charges left in the unguarded table", len(loose))
		}
	})
}

func TestLessonsAPI(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, Config{})
	var state LessonsState
	if r := env.get("/api/lessons"); r.Status != http.StatusOK || json.Unmarshal(r.Body, &state) != nil || len(state.Chapters) != 12 || state.Current != "" {
		t.Fatalf("GET /api/lessons: %d %s", r.Status, r.Body)
	}
	t.Run("every chapter has its steps and a setup that validates", func(t *testing.T) {
		for _, c := range env.Server.teaching.lessons {
			if c.Title == "" || len(c.SwitchOn) == 0 || len(c.Do) == 0 || len(c.Watch) == 0 || c.Why == "" {
				t.Errorf("chapter %s is missing text", c.Slug)
			}
			if err := c.Faults.Validate(); err != nil {
				t.Errorf("chapter %s: %v", c.Slug, err)
			}
			if err := c.Lab.Validate(); err != nil {
				t.Errorf("chapter %s: %v", c.Slug, err)
			}
		}
	})
	t.Run("starting a chapter resets and sets its switches", func(t *testing.T) {
		env.pay(uuid.NewString(), `{"order_id":"A-1","amount_satang":100}`)
		r := env.send(http.MethodPut, "/api/lessons/current", LessonChange{Slug: "no-key"})
		var got LessonStarted
		if r.Status != http.StatusOK || json.Unmarshal(r.Body, &got) != nil {
			t.Fatalf("PUT: %d %s", r.Status, r.Body)
		}
		if got.Current != "no-key" || got.Chapter != 5 || got.Of != 12 || got.Lab.Server.Mode != room.LabNoKey || got.Faults.Server.DelayMS != 800 {
			t.Fatalf("started %+v", got)
		}
		if env.charges() != 0 {
			t.Fatal("starting a chapter did not reset the charges")
		}
		es := env.Server.Hub().Recent(10)
		if last := es[len(es)-1]; last.Kind != lessonKind || !strings.Contains(last.Message, "chapter 5 of 12") {
			t.Fatalf("last event %+v", last.Event)
		}
	})
	t.Run("an unknown chapter is a 404 naming the real ones", func(t *testing.T) {
		r := env.send(http.MethodPut, "/api/lessons/current", LessonChange{Slug: "nope"})
		if r.Status != http.StatusNotFound || !bytes.Contains(r.Body, []byte("response-lost")) {
			t.Fatalf("%d %s", r.Status, r.Body)
		}
		if env.Server.guidedLessons().current() != "no-key" {
			t.Fatal("a refused chapter changed the lesson")
		}
	})
	t.Run("a lesson linked from the page that does not exist is a readable 404", func(t *testing.T) {
		r := env.get("/?lesson=nope", "Accept", "text/html")
		if r.Status != http.StatusNotFound || !bytes.Contains(r.Body, []byte("There is no lesson called")) || !bytes.Contains(r.Body, []byte("<html")) {
			t.Fatalf("%d %s", r.Status, r.Body)
		}
	})
	t.Run("leaving the lessons resets", func(t *testing.T) {
		if r := env.send(http.MethodPut, "/api/lessons/current", LessonChange{Slug: ""}); r.Status != http.StatusOK {
			t.Fatalf("%d %s", r.Status, r.Body)
		}
		if env.Server.guidedLessons().current() != "" || env.Server.lab.Settings() != room.DefaultLabSettings() || env.Server.faultSwitches().currentFaults().Server.DelayMS != 0 {
			t.Fatal("leaving left switches on")
		}
	})
}

func TestTimelineExport(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, Config{})
	env.pay(uuid.NewString(), `{"order_id":"A-8008","amount_satang":129900}`)
	env.pay("=HYPERLINK(1)", `{"order_id":"A-8009","amount_satang":100}`)

	t.Run("as JSON, a download of every event", func(t *testing.T) {
		r := env.get("/api/timeline.json")
		if r.Status != http.StatusOK || !strings.HasPrefix(r.Header.Get("Content-Disposition"), `attachment; filename="paytwice-timeline-2026`) {
			t.Fatalf("%d, Content-Disposition %q", r.Status, r.Header.Get("Content-Disposition"))
		}
		var exp TimelineExport
		if err := json.Unmarshal(r.Body, &exp); err != nil {
			t.Fatal(err)
		}
		if len(exp.Events) < 10 || exp.Events[0].Seq >= exp.Events[len(exp.Events)-1].Seq {
			t.Fatalf("%d events, oldest first?", len(exp.Events))
		}
		kinds := map[string]bool{}
		for _, e := range exp.Events {
			kinds[string(e.Kind)] = true
		}
		if !kinds["received"] || !kinds["charged"] || !kinds["completed"] {
			t.Fatalf("kinds %v", kinds)
		}
	})
	t.Run("as CSV, the same events with a header, safe for a spreadsheet", func(t *testing.T) {
		r := env.get("/api/timeline.csv")
		if r.Status != http.StatusOK || !strings.HasPrefix(r.Header.Get("Content-Type"), "text/csv") ||
			!strings.HasSuffix(r.Header.Get("Content-Disposition"), `.csv"`) {
			t.Fatalf("%d %q %q", r.Status, r.Header.Get("Content-Type"), r.Header.Get("Content-Disposition"))
		}
		rows, err := csv.NewReader(bytes.NewReader(r.Body)).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(rows[0], ",") != strings.Join(TimelineCSVHeader, ",") || len(rows) < 11 {
			t.Fatalf("%d rows, header %v", len(rows), rows[0])
		}
		var js TimelineExport
		_ = json.Unmarshal(env.get("/api/timeline.json").Body, &js)
		if len(rows)-1 != len(js.Events) {
			t.Fatalf("%d CSV rows, %d JSON events", len(rows)-1, len(js.Events))
		}
		for _, row := range rows[1:] {
			if strings.HasPrefix(row[5], "=") {
				t.Fatalf("a key that a spreadsheet would run: %q", row[5])
			}
		}
		if !bytes.Contains(r.Body, []byte("'=HYPERLINK(1)")) {
			t.Fatal("the formula-like key is missing or unescaped")
		}
	})
}

// TestLabLive: the page asks /lab/live with the versions it shows and
// gets only what changed, or 204.
func TestLabLive(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, Config{})
	live := func(q string) (int, LabLive) {
		t.Helper()
		r := env.get("/lab/live?" + q)
		var out LabLive
		if r.Status == http.StatusOK {
			if err := json.Unmarshal(r.Body, &out); err != nil {
				t.Fatal(err)
			}
		}
		return r.Status, out
	}
	status, first := live("s=0&o=99&l=0") // versions the server never had
	if status != http.StatusOK || len(first.HTML) != 8+8+1+1 || first.HTML["lesson"] == "" || first.HTML["lab-ctl-3"] == "" || first.HTML["lab-out-8"] == "" {
		t.Fatalf("%d, %d parts", status, len(first.HTML))
	}
	q := fmt.Sprintf("s=%d&o=%d&l=%d", first.V["s"], first.V["o"], first.V["l"])
	t.Run("nothing changed: 204", func(t *testing.T) {
		if status, _ := live(q); status != http.StatusNoContent {
			t.Fatalf("%d", status)
		}
	})
	t.Run("a switch changed: the switches and the summary, not the lesson", func(t *testing.T) {
		env.send(http.MethodPatch, "/api/lab", map[string]any{"server": map[string]any{"mode": "no_key"}})
		status, got := live(q)
		if status != http.StatusOK || got.HTML["lesson"] != "" || !strings.Contains(got.HTML["lab-ctl-1"], "checked") ||
			!strings.Contains(got.HTML["lab-summary"], "1 no key") || got.V["s"] == first.V["s"] {
			t.Fatalf("%d %v", status, got.V)
		}
	})
	t.Run("a payment changed the outcomes", func(t *testing.T) {
		env.pay("", `{"order_id":"A-9","amount_satang":100}`)
		env.pay("", `{"order_id":"A-9","amount_satang":100}`)
		status, got := live(q)
		if status != http.StatusOK || !strings.Contains(got.HTML["lab-out-1"], "order charged more than once") ||
			!strings.Contains(got.HTML["lab-out-1"], "<strong>1</strong>") {
			t.Fatalf("%d %q", status, got.HTML["lab-out-1"])
		}
	})
	t.Run("a lesson started: the lesson, for the board when asked", func(t *testing.T) {
		env.send(http.MethodPut, "/api/lessons/current", LessonChange{Slug: "response-lost"})
		status, got := live(fmt.Sprintf("l=%d&board=1", first.V["l"]))
		if status != http.StatusOK || len(got.HTML) != 1 || !strings.Contains(got.HTML["lesson"], "lesson-board") ||
			!strings.Contains(got.HTML["lesson"], `data-slug="response-lost"`) {
			t.Fatalf("%d %v", status, got.HTML)
		}
	})
}

package web

import (
	"bufio"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"paytwice/web/live"
)

// sseEvent is one event read from a stream: its id and its data lines
// joined; comment lines (heartbeats) come back as Comment.
type sseEvent struct {
	ID      uint64
	Name    string
	Data    string
	Comment string
}

// sseStream is a client of GET /events.
type sseStream struct {
	t      *testing.T
	res    *http.Response
	r      *bufio.Reader
	cancel context.CancelFunc
}

func openStream(t *testing.T, env *testEnv, query string, header ...string) *sseStream {
	t.Helper()
	// The stream's bound, like waitUntil's, only keeps a broken test from
	// hanging: 20 s ran out under -race on a loaded machine while a test
	// was still on its way.
	ctx, cancel := context.WithTimeout(context.Background(), waitUntilBound)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, env.URL+"/events"+query, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	s := &sseStream{t: t, res: res, r: bufio.NewReader(res.Body), cancel: cancel}
	t.Cleanup(s.Close)
	return s
}

func (s *sseStream) Close() { s.cancel(); s.res.Body.Close() }

// next reads one event or comment, skipping the retry hint.
func (s *sseStream) next() (sseEvent, error) {
	var ev sseEvent
	var data []string
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			return ev, err
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if ev.ID != 0 || ev.Name != "" || len(data) > 0 || ev.Comment != "" {
				ev.Data = strings.Join(data, "\n")
				return ev, nil
			}
		case strings.HasPrefix(line, ":"):
			ev.Comment = strings.TrimSpace(line[1:])
		case strings.HasPrefix(line, "id: "):
			_, ev.ID, _ = live.ParseEventID(line[4:])
		case strings.HasPrefix(line, "event: "):
			ev.Name = line[7:]
		case strings.HasPrefix(line, "data: "):
			data = append(data, line[6:])
		}
	}
}

// nextFrame reads events until a frame, failing on anything else.
func (s *sseStream) nextFrame() sseEvent {
	s.t.Helper()
	for {
		ev, err := s.next()
		if err != nil {
			s.t.Fatalf("reading the stream: %v", err)
		}
		if ev.Name == "frame" {
			return ev
		}
	}
}

// openGzipStream opens a stream that asks for gzip, fails unless it is
// answered in gzip, and reads it through a gzip reader.
func openGzipStream(t *testing.T, env *testEnv, query string, header ...string) *sseStream {
	t.Helper()
	s := openStream(t, env, query, header...)
	if ce := s.res.Header.Get("Content-Encoding"); ce != "gzip" {
		t.Fatalf("Content-Encoding %q, want gzip", ce)
	}
	zr, err := gzip.NewReader(s.res.Body)
	if err != nil {
		t.Fatal(err)
	}
	s.r = bufio.NewReader(zr)
	return s
}

// timelineRowStart finds the start of each timeline row in frames.
var timelineRowStart = regexp.MustCompile(`<li id="(tl-[^"]+)"`)

// paidOnRowOf says whether frames, the data of a stream's frames joined,
// draw a timeline row for key and then the outcome "201 paid" on that row
// (by the row's own id): only the request that made the row could.
func paidOnRowOf(frames, key string) bool {
	starts := timelineRowStart.FindAllStringSubmatchIndex(frames, -1)
	for i, m := range starts {
		end := len(frames)
		if i+1 < len(starts) {
			end = starts[i+1][0]
		}
		// A row's head, with its key, comes before anything of the next row.
		if !strings.Contains(frames[m[0]:end], `<code title="`+key+`">`) {
			continue
		}
		outcome := regexp.MustCompile(`id="` + regexp.QuoteMeta(frames[m[2]:m[3]]) + `-out"[^>]*><span[^>]*>201 paid</span>`)
		if outcome.MatchString(frames[m[0]:]) {
			return true
		}
	}
	return false
}

// isRefresh says whether a frame starts with a refresh (the lab's numbers,
// busy-mode totals). A refresh carries the id of the event frame before it,
// by design, so it may repeat the last id a viewer saw: only frames of
// events must have ids that grow.
func isRefresh(f sseEvent) bool { return strings.HasPrefix(f.Data, "<!--refresh-->") }

func TestEventStream(t *testing.T) {
	t.Parallel()
	t.Run("frames carry ids and htmx out-of-band fragments, plain without gzip", func(t *testing.T) {
		env := newTestEnv(t, Config{})
		s := openStream(t, env, "?since="+live.EventID(env.Server.hub.Epoch(), 0), "Accept-Encoding", "identity")
		if ct := s.res.Header.Get("Content-Type"); ct != "text/event-stream" {
			t.Fatalf("Content-Type %q", ct)
		}
		if ce := s.res.Header.Get("Content-Encoding"); ce != "" {
			t.Fatalf("the stream is compressed (%s) for a client that did not take it", ce)
		}
		env.pay("k-1", `{"order_id":"A-1","amount_satang":100}`)
		var last uint64
		var all strings.Builder
		for !strings.Contains(all.String(), "201 paid") {
			f := s.nextFrame()
			if f.ID < last || f.ID == last && !isRefresh(f) {
				t.Fatalf("id %d after %d", f.ID, last)
			}
			last = f.ID
			if !strings.Contains(f.Data, `hx-swap-oob=`) {
				t.Fatalf("frame %d has no out-of-band swap: %s", f.ID, f.Data)
			}
			all.WriteString(f.Data)
		}
		for _, want := range []string{"POST + key", "claimed", "INSERT charge", `id="c-ch_`, `hx-swap-oob="afterbegin:#keys-body"`} {
			if !strings.Contains(all.String(), want) {
				t.Errorf("the frames never mention %q", want)
			}
		}
	})

	t.Run("with gzip, each payment's frames arrive as they are written", func(t *testing.T) {
		env := newTestEnv(t, Config{})
		// Asked for explicitly, the transport leaves the body as it came.
		a := openGzipStream(t, env, "", "Accept-Encoding", "gzip")
		b := openGzipStream(t, env, "", "Accept-Encoding", "br;q=1.0, gzip;q=0.8")
		// Each payment is read in full before the next is made: a
		// compressor that held bytes back until its buffer filled would
		// leave the reader waiting here (to the stream's bound). What is
		// waited for only this payment draws: the row of its charge, and
		// the outcome on its own timeline row, found by its key.
		for i := range 3 {
			key := fmt.Sprintf("k-%d", i)
			r := env.pay(key, fmt.Sprintf(`{"order_id":"A-%d","amount_satang":100}`, i))
			charge, _ := r.JSON(t)["charge_id"].(string)
			if r.Status != http.StatusCreated || charge == "" {
				t.Fatalf("payment %d: %d %s", i, r.Status, r.Body)
			}
			for _, s := range []*sseStream{a, b} {
				var all strings.Builder
				for !strings.Contains(all.String(), `id="c-`+charge+`"`) || !paidOnRowOf(all.String(), key) {
					all.WriteString(s.nextFrame().Data)
				}
			}
		}
	})

	for _, gz := range []bool{false, true} {
		name := "a reconnecting viewer resumes after Last-Event-ID, with nothing missed or repeated"
		open := func(t *testing.T, env *testEnv, query string, header ...string) *sseStream {
			return openStream(t, env, query, append(header, "Accept-Encoding", "identity")...)
		}
		if gz {
			name += ", in gzip"
			open = func(t *testing.T, env *testEnv, query string, header ...string) *sseStream {
				return openGzipStream(t, env, query, append(header, "Accept-Encoding", "gzip")...)
			}
		}
		t.Run(name, func(t *testing.T) {
			env := newTestEnv(t, Config{})
			s := open(t, env, "?since="+live.EventID(env.Server.hub.Epoch(), 0))
			env.pay("k-1", `{"order_id":"A-1","amount_satang":100}`)
			var last uint64
			for last < env.Server.hub.LastSeq() {
				last = s.nextFrame().ID
			}
			s.Close()

			env.pay("k-2", `{"order_id":"A-2","amount_satang":200}`) // while disconnected
			s2 := open(t, env, "?since="+live.EventID(env.Server.hub.Epoch(), 0), "Last-Event-ID", live.EventID(env.Server.hub.Epoch(), last))
			// The frames it missed come one by one, or joined into one event
			// when a wake carries them: either way the first starts with the
			// next event and carries the missed request.
			first := s2.nextFrame()
			for i := 0; i < 100 && first.ID == last && isRefresh(first); i++ {
				first = s2.nextFrame()
			}
			if first.ID <= last {
				t.Fatalf("resumed at %d, after %d: a frame sent again", first.ID, last)
			}
			if !strings.Contains(first.Data, "A-2") {
				t.Fatalf("the first frame after resuming is not the missed request: %s", first.Data)
			}
			// And the stream goes on past the frames it caught up on.
			env.pay("k-3", `{"order_id":"A-3","amount_satang":300}`)
			var all strings.Builder
			for !paidOnRowOf(all.String(), "k-3") {
				all.WriteString(s2.nextFrame().Data)
			}
		})
	}

	t.Run("a viewer from before a restart gets one frame that redraws every panel", func(t *testing.T) {
		env := newTestEnv(t, Config{})
		env.pay("k-1", `{"order_id":"A-1","amount_satang":100}`)
		s := openGzipStream(t, env, "", "Last-Event-ID", "999999", "Accept-Encoding", "gzip")
		f := s.nextFrame()
		for _, want := range []string{`id="timeline"`, `id="keys-body"`, `id="charges-body"`, `id="counters"`, `id="fault-fields"`} {
			if !strings.Contains(f.Data, want) {
				t.Errorf("the redraw lacks %s", want)
			}
		}
		if f.ID != env.Server.live().Snapshot().Seq {
			t.Errorf("the redraw's id is %d, want the projector's %d", f.ID, env.Server.live().Snapshot().Seq)
		}
	})
}

func TestEventStreamLimits(t *testing.T) {
	t.Parallel()
	t.Run("beyond the class's share a student's stream gets 503 with Retry-After; the presenter still gets one; a slot frees when a viewer leaves", func(t *testing.T) {
		env := newTestEnv(t, Config{PresenterToken: "hunter2", Limits: Limits{MaxStreams: 4, PresenterStreams: 2}})
		proj := env.Server.live()
		a := openStream(t, env, "")
		openStream(t, env, "")
		waitUntil(t, "two viewers", func() bool { return proj.Viewers() == 2 })
		third := openStream(t, env, "")
		if third.res.StatusCode != http.StatusServiceUnavailable || third.res.Header.Get("Retry-After") == "" ||
			third.res.Header.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("third stream: %d, Retry-After %q, %s", third.res.StatusCode, third.res.Header.Get("Retry-After"), third.res.Header.Get("Content-Type"))
		}
		for i := range 2 {
			if p := openStream(t, env, "", PresenterHeader, "hunter2"); p.res.StatusCode != http.StatusOK {
				t.Fatalf("the presenter's stream %d: %d", i+1, p.res.StatusCode)
			}
		}
		if p := openStream(t, env, "", PresenterHeader, "hunter2"); p.res.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("a stream beyond every one the server keeps, the presenter's: %d", p.res.StatusCode)
		}
		a.Close()
		waitUntil(t, "the first viewer to leave", func() bool { return proj.Viewers() == 3 })
		if again := openStream(t, env, ""); again.res.StatusCode != http.StatusOK {
			t.Fatalf("after a viewer left: %d", again.res.StatusCode)
		}
	})

	t.Run("an address that opens streams in a loop gets 429 with Retry-After once its burst is spent", func(t *testing.T) {
		rate := Rate{Burst: 20, Every: 100 * time.Millisecond}
		env := newTestEnv(t, Config{Limits: Limits{StreamOpens: rate}})
		frozen := time.Now()
		env.Server.admission.streams.opens.now = func() time.Time { return frozen }
		for i := range rate.Burst {
			s := openStream(t, env, "")
			if s.res.StatusCode != http.StatusOK {
				t.Fatalf("open %d: %d", i+1, s.res.StatusCode)
			}
			s.Close()
		}
		over := openStream(t, env, "")
		if over.res.StatusCode != http.StatusTooManyRequests || over.res.Header.Get("Retry-After") == "" ||
			over.res.Header.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("open %d: %d, Retry-After %q, %s", rate.Burst+1, over.res.StatusCode, over.res.Header.Get("Retry-After"), over.res.Header.Get("Content-Type"))
		}
		frozen = frozen.Add(rate.Every)
		if again := openStream(t, env, ""); again.res.StatusCode != http.StatusOK {
			t.Fatalf("after one interval: %d", again.res.StatusCode)
		}
	})
}

// waitUntil polls cond every few milliseconds, for up to waitUntilBound.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitUntilBound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitUntilBound only keeps a broken test from hanging: what waitUntil
// waits for takes milliseconds on an idle machine, but seconds on a
// loaded 2-core CI machine running every package under -race, so the
// bound is generous rather than tight. No test relies on it running out.
const waitUntilBound = 2 * time.Minute

func TestCrossOriginProtection(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, Config{})
	body := `{"order_id":"A-1","amount_satang":100}`
	for _, tc := range []struct {
		name    string
		headers []string
		want    int
	}{
		{"curl, with neither Origin nor Sec-Fetch-Site, may pay", nil, http.StatusCreated},
		{"paytwice's own page may pay", []string{"Sec-Fetch-Site", "same-origin", "Origin", env.URL}, http.StatusCreated},
		{"a page of another site may not", []string{"Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example"}, http.StatusForbidden},
		{"an older browser's cross-origin request may not", []string{"Origin", "https://evil.example"}, http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := env.pay("co-"+strconv.Itoa(len(tc.name)), body, tc.headers...)
			if r.Status != tc.want {
				t.Fatalf("status %d, want %d: %s", r.Status, tc.want, r.Body)
			}
			if r.Status == http.StatusForbidden && !strings.HasPrefix(r.Header.Get("Content-Type"), "application/problem+json") {
				t.Errorf("Content-Type %q, want problem+json", r.Header.Get("Content-Type"))
			}
		})
	}
	t.Run("nothing was charged for the refused ones", func(t *testing.T) {
		if n := env.charges(); n != 2 {
			t.Fatalf("%d charges, want 2", n)
		}
	})
	t.Run("switches from another site are refused too", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodPost, env.URL+"/api/reset", nil)
		req.Header.Set("Sec-Fetch-Site", "cross-site")
		r, err := do(req)
		if err != nil || r.Status != http.StatusForbidden {
			t.Fatalf("POST /api/reset cross-site: %d %v", r.Status, err)
		}
	})
}

func TestPresenterLink(t *testing.T) {
	t.Parallel()
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(t *testing.T, u string) *http.Response {
		t.Helper()
		res, err := noRedirect.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res
	}
	t.Run("the right token sets a strict, HttpOnly cookie and drops the token from the address", func(t *testing.T) {
		env := newTestEnv(t, Config{PresenterToken: "s3cret"})
		res := get(t, env.URL+"/board?token=s3cret")
		if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/board" {
			t.Fatalf("%d to %q, want 303 to /board", res.StatusCode, res.Header.Get("Location"))
		}
		var c *http.Cookie
		for _, ck := range res.Cookies() {
			if ck.Name == PresenterCookie {
				c = ck
			}
		}
		if c == nil || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" {
			t.Fatalf("cookie %+v", c)
		}
	})
	t.Run("a wrong token is refused", func(t *testing.T) {
		env := newTestEnv(t, Config{PresenterToken: "s3cret"})
		if res := get(t, env.URL+"/board?token=guess"); res.StatusCode != http.StatusForbidden || len(res.Cookies()) != 0 {
			t.Fatalf("%d with cookies %v", res.StatusCode, res.Cookies())
		}
	})
	t.Run("the board shows who may change switches", func(t *testing.T) {
		env := newTestEnv(t, Config{PresenterToken: "s3cret"})
		student := env.get("/board")
		if !strings.Contains(string(student.Body), `<fieldset id="faults" disabled`) {
			t.Error("a student's board has enabled switches")
		}
		presenter := env.get("/board", "Cookie", PresenterCookie+"="+env.Server.admission.presenter.cookie)
		if strings.Contains(string(presenter.Body), `<fieldset id="faults" disabled`) {
			t.Error("the presenter's board has disabled switches")
		}
	})
}

func TestCheckoutPage(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, Config{})
	r := env.get("/", "Accept", "text/html")
	if r.Status != http.StatusOK {
		t.Fatalf("GET /: %d", r.Status)
	}
	t.Run("gives the browser a session, so its payments have their own scope", func(t *testing.T) {
		if !strings.Contains(r.Header.Get("Set-Cookie"), sessionCookie+"=") {
			t.Fatalf("Set-Cookie %q", r.Header.Get("Set-Cookie"))
		}
	})
	t.Run("carries a strict Content-Security-Policy", func(t *testing.T) {
		csp := r.Header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "default-src 'self'") || strings.Contains(csp, "unsafe-inline") {
			t.Fatalf("CSP %q", csp)
		}
	})
	t.Run("connects the live panels right after the state it shows", func(t *testing.T) {
		env.pay("k-1", `{"order_id":"A-1","amount_satang":100}`)
		waitUntil(t, "the projector", func() bool { return env.Server.live().Snapshot().Seq == env.Server.hub.LastSeq() })
		page := string(env.get("/").Body)
		want := fmt.Sprintf(`sse-connect="/events?since=%s"`, live.EventID(env.Server.hub.Epoch(), env.Server.hub.LastSeq()))
		if !strings.Contains(page, want) {
			t.Fatalf("the page lacks %s", want)
		}
		if !strings.Contains(page, "A-1") {
			t.Fatal("the page does not show the earlier payment")
		}
	})
	t.Run("backoff_ms shrinks the client's retry delays for tests", func(t *testing.T) {
		page := string(env.get("/?backoff_ms=20").Body)
		if !strings.Contains(page, `data-backoff-base-ms="20"`) || !strings.Contains(page, `data-backoff-cap-ms="320"`) {
			t.Fatal("backoff_ms=20 did not reach the page")
		}
		if page := string(env.get("/?backoff_ms=99999").Body); !strings.Contains(page, `data-backoff-base-ms="500"`) {
			t.Fatal("an out-of-range backoff_ms was used")
		}
	})
}

// One browser session holds at most StreamsPerSession live views, so that
// one phone behind a class's shared address cannot take the address's
// share from the others: past it that session gets 429 with a sentence,
// while another session from the same address still gets its own.
func TestOneSessionHoldsAtMostItsShareOfTheLiveViews(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, Config{PresenterToken: "s3cret", Limits: Limits{StreamsPerAddress: 10, StreamsPerSession: 2}})
	class := fromAddress("127.0.0.5")
	open := func(session string) (*heldStream, int) {
		t.Helper()
		h, status := openHeld(context.Background(), class, env.URL, "Cookie", session)
		if h != nil {
			t.Cleanup(h.close)
		}
		return h, status
	}
	mine := sessionCookie + "=" + uuid.NewString()
	for i := range 2 {
		if h, status := open(mine); h == nil {
			t.Fatalf("the phone's live view %d: %d", i+1, status)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, env.URL+"/events", nil)
	req.Header.Set("Cookie", mine)
	res, err := class.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode == http.StatusOK {
		res.Body.Close() // a live view: read on, it would never end
		t.Fatal("the phone's live view past its session's share was let in")
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") == "" || !strings.Contains(string(body), "streams-per-session") {
		t.Fatalf("the phone's live view past its session's share: %d, Retry-After %q, %s", res.StatusCode, res.Header.Get("Retry-After"), body)
	}
	if h, status := open(sessionCookie + "=" + uuid.NewString()); h == nil {
		t.Fatalf("another session from the same address: %d", status)
	}
}

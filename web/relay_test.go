package web

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"paytwice/views"
	"paytwice/web/live"
	"paytwice/web/room"
)

// rowsOf returns the timeline rows a server's pages show now, once its
// projector has applied every event its hub holds.
func rowsOf(t *testing.T, env *testEnv) []views.TimelineRow {
	t.Helper()
	return waitProjector(t, env).Snapshot().Timeline
}

// waitRow waits until a server's timeline has a row that match accepts.
func waitRow(t *testing.T, env *testEnv, what string, match func(views.TimelineRow) bool) views.TimelineRow {
	t.Helper()
	var found views.TimelineRow
	waitUntil(t, what, func() bool {
		for _, r := range rowsOf(t, env) {
			if match(r) {
				found = r
				return true
			}
		}
		return false
	})
	return found
}

func keyed(key, server, outcome string) func(views.TimelineRow) bool {
	return func(r views.TimelineRow) bool {
		return r.Key == key && r.Server == server && (outcome == "" || r.Outcome.Text == outcome)
	}
}

// claimedOn matches the row of a request that claimed key on server.
func claimedOn(key, server string) func(views.TimelineRow) bool {
	return func(r views.TimelineRow) bool {
		return r.Key == key && r.Server == server && slices.ContainsFunc(r.Steps, func(s views.Step) bool { return s.Badge.Text == "claimed" })
	}
}

func countCharges(t *testing.T, db Store) int {
	t.Helper()
	n, err := db.CountCharges(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestRelayShowsAPaymentOnEveryServer(t *testing.T) {
	waitsOnRealClocks(t)
	envs, _ := classServers(t, "s1", "s2")
	a, b := envs[0], envs[1]
	stream := openStream(t, b, "")
	stream.nextFrame() // the first drawing

	if r := a.pay("relay-k1", `{"order_id":"A-1","amount_satang":1000}`); r.Status != http.StatusCreated {
		t.Fatalf("pay on s1: %d %s", r.Status, r.Body)
	}
	// B's stream draws A's request, named as A's.
	for {
		f := stream.nextFrame()
		if strings.Contains(f.Data, `class="srv"`) && strings.Contains(f.Data, ">s1</span>") {
			break
		}
	}
	row := waitRow(t, b, "s1's paid request on s2's timeline", keyed("relay-k1", "s1", "201 paid"))
	if len(row.Steps) < 5 {
		t.Errorf("s2 drew %d steps of s1's request, want all of them: %+v", len(row.Steps), row.Steps)
	}
	// Its time is A's, not the moment B received it.
	var published time.Time
	for _, e := range a.Server.hub.Recent(live.DefaultSize) {
		if e.Key == "relay-k1" && e.Kind == live.Received {
			published = e.Time
		}
	}
	if !row.Time.Equal(published) {
		t.Errorf("s2 shows the request at %v, s1 received it at %v", row.Time, published)
	}
	page := b.get("/")
	if !strings.Contains(string(page.Body), ">s1</span>") {
		t.Errorf("s2's checkout page does not name s1 on the request's row")
	}
	// The export names the server of every event.
	csvLines := strings.Split(string(b.get("/api/timeline.csv").Body), "\n")
	if !strings.HasSuffix(csvLines[0], ",message,server") || !strings.Contains(strings.Join(csvLines, "\n"), ",relay-k1,A-1,1000,,POST /v1/payments,s1") {
		t.Errorf("s2's CSV export does not name s1:\n%s", strings.Join(csvLines[:min(4, len(csvLines))], "\n"))
	}
	if !strings.Contains(string(b.get("/api/timeline.json").Body), `"server":"s1"`) {
		t.Errorf("s2's JSON export does not name s1")
	}
	// A's own timeline names it too, and nothing comes back to A twice.
	waitRow(t, a, "s1's own row", keyed("relay-k1", "s1", "201 paid"))
	for _, e := range a.Server.hub.Recent(live.DefaultSize) {
		if e.Remote {
			t.Errorf("s1 received its own event back: %+v", e.Event)
		}
	}
}

func TestRelayDoubleClickOnTwoServersShowsBothAndChargesOnce(t *testing.T) {
	waitsOnRealClocks(t)
	envs, db := classServers(t, "s1", "s2", "s3")
	a, b := envs[0], envs[1]
	release := a.holdGateway()
	body := `{"order_id":"A-2","amount_satang":1500}`
	first := make(chan response, 1)
	go func() {
		r, err := a.tryPay("relay-dbl", body)
		if err != nil {
			t.Error(err)
		}
		first <- r
	}()
	// The first click holds the key on s1; the second lands on s2.
	waitRow(t, b, "s1's claim on s2's timeline", claimedOn("relay-dbl", "s1"))
	if r := b.pay("relay-dbl", body); r.Status != http.StatusConflict {
		t.Fatalf("second click on s2: %d %s", r.Status, r.Body)
	}
	release()
	if r := <-first; r.Status != http.StatusCreated {
		t.Fatalf("first click on s1: %d %s", r.Status, r.Body)
	}
	for _, env := range envs {
		waitRow(t, env, "s1's charge", keyed("relay-dbl", "s1", "201 paid"))
		waitRow(t, env, "s2's 409", keyed("relay-dbl", "s2", "409 in progress"))
	}
	if n := countCharges(t, db); n != 1 {
		t.Fatalf("%d charges, want 1", n)
	}
}

func TestRelayResetOnOneServerClearsEveryTimeline(t *testing.T) {
	waitsOnRealClocks(t)
	envs, _ := classServers(t, "s1", "s2")
	a, b := envs[0], envs[1]
	a.pay("relay-r1", `{"order_id":"A-3","amount_satang":700}`)
	b.pay("relay-r2", `{"order_id":"A-4","amount_satang":700}`)
	waitRow(t, b, "s1's row on s2", keyed("relay-r1", "s1", "201 paid"))
	req, _ := http.NewRequest(http.MethodPost, a.URL+"/api/reset", nil)
	if r, err := do(req); err != nil || r.Status != http.StatusOK {
		t.Fatalf("reset: %v %d %s", err, r.Status, r.Body)
	}
	waitUntil(t, "s2's timeline to hold only s1's reset", func() bool {
		rows := rowsOf(t, b)
		return len(rows) == 1 && rows[0].Title == "Reset" && rows[0].Server == "s1"
	})
	for _, e := range b.Server.hub.Recent(live.DefaultSize) {
		if e.Kind != live.Reset {
			t.Errorf("s2's hub still holds %s of %q after the reset", e.Kind, e.Key)
		}
	}
}

// heldBatch is peers whose relay holds back the first batch of events
// that mentions hold, until release is closed, as a relay whose batch
// waits out its pause and a busy database while another server's batch
// commits first. The batch is then sent whatever its time-out says: it
// is the order of the commits that the tests are about.
type heldBatch struct {
	room.Peers
	hold    string
	held    chan struct{} // closed when the batch is held
	release chan struct{}
	once    *sync.Once
}

func (h heldBatch) NotifyNumbered(ctx context.Context, channel string, payloads ...string) (uint64, error) {
	if channel == room.RelayChannel && slices.ContainsFunc(payloads, func(p string) bool { return strings.Contains(p, h.hold) }) {
		first := false
		h.once.Do(func() { first = true })
		if first {
			close(h.held)
			<-h.release
			ctx = context.WithoutCancel(ctx)
		}
	}
	return h.Peers.NotifyNumbered(ctx, channel, payloads...)
}

// A payment made before another server's reset, whose batch reaches the
// room's order after the reset's, is not drawn after the reset: its
// charge was emptied with the tables, and a "201 paid" row after the
// reset would say it is in the books. (Without the reset's generation on
// the relayed events, both timelines drew it.)
func TestRelayDropsAPaymentMadeBeforeAResetWhoseBatchComesAfterIt(t *testing.T) {
	waitsOnRealClocks(t)
	held := heldBatch{hold: "relay-late", held: make(chan struct{}), release: make(chan struct{}), once: new(sync.Once)}
	c := newClass(t)
	envs := c.servers(func(i int, peers room.Peers) room.Peers {
		if i == 0 {
			return peers
		}
		held.Peers = peers
		return held
	}, "s1", "s2")
	a, b := envs[0], envs[1]
	b.pay("relay-late", `{"order_id":"A-7","amount_satang":700}`)
	select {
	case <-held.held:
	case <-time.After(waitUntilBound):
		t.Fatalf("s2's batch of relay-late was not held within %s", waitUntilBound)
	}
	req, _ := http.NewRequest(http.MethodPost, a.URL+"/api/reset", nil)
	if r, err := do(req); err != nil || r.Status != http.StatusOK {
		t.Fatalf("reset: %v %d %s", err, r.Status, r.Body)
	}
	onlyReset := func(rows []views.TimelineRow) bool {
		return len(rows) == 1 && rows[0].Title == "Reset" && rows[0].Server == "s1"
	}
	// s1's reset is in the room's order before s2's batch is sent.
	waitUntil(t, "s1's timeline to hold only its reset", func() bool { return onlyReset(rowsOf(t, a)) })
	close(held.release)
	// A payment after the reset comes after the held batch on s2's relay:
	// once every server draws it, each has placed the held batch.
	b.pay("relay-after-reset", `{"order_id":"A-8","amount_satang":700}`)
	for _, env := range envs {
		waitRow(t, env, "s2's payment after the reset", keyed("relay-after-reset", "s2", "201 paid"))
		var got []string
		for _, r := range rowsOf(t, env) {
			got = append(got, r.Title+" "+r.Key+" "+r.Outcome.Text)
		}
		// Newest first: the payment after the reset, then the reset.
		if len(got) != 2 || !strings.Contains(got[0], "relay-after-reset") || !strings.HasPrefix(got[1], "Reset") {
			t.Errorf("%s's timeline after the reset: %q, want the reset and the payment after it", env.Server.cfg.Name, got)
		}
	}
	if local, gateway := c.books(); local != 1 || gateway != 1 {
		t.Errorf("the books hold %d local and %d gateway charges, want 1 and 1", local, gateway)
	}
}

// heldRelisten is peers whose listener, once PostgreSQL ended its first
// connection, hangs up again as soon as it has reconnected and listens
// anew only when release is closed: what is sent meanwhile never reaches
// it as a notification, as when a reconnection takes long.
type heldRelisten struct {
	room.Peers
	held    chan struct{} // closed when the listener hung up to wait
	release chan struct{}
}

func (h heldRelisten) ListenEach(ctx context.Context, channels []string, onListen func(), onNotify func(channel, payload string)) error {
	starts := 0
	for {
		lctx, cancel := context.WithCancel(ctx)
		hold := false
		err := h.Peers.ListenEach(lctx, channels, func() {
			starts++
			if starts == 2 { // the reconnection after the connection was ended
				hold = true
				cancel()
				return
			}
			onListen()
		}, onNotify)
		cancel()
		if ctx.Err() != nil || !hold {
			return err
		}
		close(h.held)
		select {
		case <-h.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// A relay whose listening connection PostgreSQL ended listens again and
// reads back the batches the others sent meanwhile: its pages get every
// event once, with no "gap" row and no reload of the tables.
func TestRelayRecoversAKilledListenerWithoutRedrawingThePages(t *testing.T) {
	waitsOnRealClocks(t)
	db := newPostgresClass(t)
	held := heldRelisten{held: make(chan struct{}), release: make(chan struct{})}
	envs := db.servers(func(i int, peers room.Peers) room.Peers {
		if i == 0 {
			return peers
		}
		held.Peers = peers
		return held
	}, "s1", "s2")
	a, b := envs[0], envs[1]
	var killed int
	if err := db.pg.Pool().QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid() AND query = 'LISTEN "'||$1||'"'`, room.RelayChannel).Scan(&killed); err != nil {
		t.Fatal(err)
	}
	if killed != 2 {
		t.Fatalf("terminated %d listening backends, want 2", killed)
	}
	select {
	case <-held.held:
	case <-time.After(30 * time.Second):
		t.Fatal("s2's listener did not reconnect within 30 s")
	}
	waitUntil(t, "s1's relay to listen again", func() bool { return a.Server.servers.relay.Listening() == 2 })
	// Paid while s2 does not listen: its events reach s2 only read back.
	// The marker after them, once kept, says every one of them was sent.
	a.pay("relay-during", `{"order_id":"A-5","amount_satang":900}`)
	a.Server.hub.Publish(live.Event{Kind: live.Pruned, Time: time.Now(), Message: "relay-held-marker"})
	waitUntil(t, "s1's relay to send the payment's events", func() bool {
		var sent bool
		err := db.pg.Pool().QueryRow(context.Background(),
			`SELECT EXISTS (SELECT FROM relay_batches WHERE array_to_string(payloads, ' ') LIKE '%relay-held-marker%')`).Scan(&sent)
		return err == nil && sent
	})
	if n := b.Server.servers.relay.Listening(); n != 1 {
		t.Fatalf("s2's relay started listening %d times before it was let, want once", n)
	}
	close(held.release)
	waitUntil(t, "s2's relay to listen again", func() bool { return b.Server.servers.relay.Listening() == 2 })
	a.pay("relay-after", `{"order_id":"A-6","amount_satang":900}`)
	waitRow(t, b, "s1's payment after the reconnection", keyed("relay-after", "s1", "201 paid"))
	waitRow(t, b, "s1's payment during the reconnection", keyed("relay-during", "s1", "201 paid"))
	if b.Server.servers.relay.ReadBack() == 0 {
		t.Error("s2 read nothing back, yet it did not listen while s1's payment was sent")
	}
	for _, e := range b.Server.hub.Recent(live.DefaultSize) {
		if e.Kind == live.Gap {
			t.Errorf("s2 was told of a gap, and its pages reloaded: %s", e.Message)
		}
	}
	for _, key := range []string{"relay-during", "relay-after"} {
		n := 0
		for _, e := range b.Server.hub.Recent(live.DefaultSize) {
			if e.Key == key && e.Kind == live.Completed {
				n++
			}
		}
		if n != 1 {
			t.Errorf("s2 published s1's completion of %s %d times, want once", key, n)
		}
	}
}

// stalledNotify is peers whose notifications of events wait until the
// gate opens, like a database that stopped answering, once armed. The
// relays' hellos (a head and no events) go through: a relay that hears
// another for the first time says hello back from a goroutine of its
// own, which under load may send it after both relays count each other
// (all that the class waits for), and after the test armed. That hello,
// held at the gate, took the signal meant for "first": the test then
// published the ring's worth while the relay was still reading, the
// batch the relay took to the gate could carry more than the ten events
// past the ring that the test publishes, the ring never moved past the
// relay, and the test waited out its two-minute bound for a skip.
type stalledNotify struct {
	room.Peers
	gate    chan struct{}
	waiting chan struct{} // receives when a notification starts waiting
	armed   *atomic.Bool
}

// holds reports whether a notification of payloads on channel waits for
// the gate: an armed one of the relay's with events.
func (s stalledNotify) holds(channel string, payloads []string) bool {
	if !s.armed.Load() || channel != room.RelayChannel {
		return false
	}
	for _, p := range payloads {
		if strings.IndexByte(p, '\n') != len(p)-1 {
			return true // more than a head: events
		}
	}
	return false
}

// wait blocks at the gate, saying so on waiting.
func (s stalledNotify) wait(ctx context.Context) error {
	select {
	case s.waiting <- struct{}{}:
	default:
	}
	select {
	case <-s.gate:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s stalledNotify) Notify(ctx context.Context, channel string, payloads ...string) error {
	if s.holds(channel, payloads) {
		if err := s.wait(ctx); err != nil {
			return err
		}
	}
	return s.Peers.Notify(ctx, channel, payloads...)
}

func (s stalledNotify) NotifyNumbered(ctx context.Context, channel string, payloads ...string) (uint64, error) {
	if s.holds(channel, payloads) {
		if err := s.wait(ctx); err != nil {
			return 0, err
		}
	}
	return s.Peers.NotifyNumbered(ctx, channel, payloads...)
}

// TestRelayThatFallsBehindSkipsCountsAndSaysSo: a relay held on the
// database while its server publishes more than the hub's ring holds
// skips what it missed, counts it, and tells the other servers, whose
// pages show the gap and are redrawn.
func TestRelayThatFallsBehindSkipsCountsAndSaysSo(t *testing.T) {
	waitsOnRealClocks(t)
	stalled := stalledNotify{gate: make(chan struct{}), waiting: make(chan struct{}, 1), armed: new(atomic.Bool)}
	envs := newClass(t).servers(func(i int, peers room.Peers) room.Peers {
		if i > 0 {
			return peers
		}
		stalled.Peers = peers
		return stalled
	}, "s1", "s2")
	a, b := envs[0], envs[1]
	stream := openStream(t, b, "")
	stream.nextFrame()

	stalled.armed.Store(true)
	a.Server.hub.Publish(live.Event{Kind: live.Pruned, Message: "first"})
	// The relay holds "first" and waits on the database.
	select {
	case <-stalled.waiting:
	case <-time.After(waitUntilBound):
		t.Fatal("s1's relay never sent \"first\" to the database")
	}
	// The payment path publishes on: a whole ring and more, none of it
	// waiting for the relay.
	for i := range live.DefaultSize + 10 {
		a.Server.hub.Publish(live.Event{Kind: live.Pruned, Message: fmt.Sprint("more ", i)})
	}
	close(stalled.gate)
	waitUntil(t, "the relay to count what it skipped", func() bool { return a.Server.servers.relay.Skipped() > 0 })
	// s2 hears of the gap from s1, shows it and redraws its pages.
	waitRow(t, b, "s1's gap on s2", func(r views.TimelineRow) bool {
		return r.Title == "Other servers" && r.Server == "s1"
	})
	for {
		f := stream.nextFrame()
		if strings.Contains(f.Data, `id="timeline"`) && strings.Contains(f.Data, "could not be relayed") {
			break
		}
	}
	if n := a.Server.servers.relay.Skipped(); n > live.DefaultSize+10 {
		t.Errorf("skipped %d events of %d", n, live.DefaultSize+11)
	}
}

// Another server's notification that holds a reset is published in two
// runs: the events before the reset, then this server's memory emptied,
// then the reset and what followed it, each marked as another server's.
func TestAnotherServersResetEmptiesWhatCameBeforeItInItsNotification(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, Config{})
	at := time.Now()
	remoteEvents{env.Server}.Heard([]live.Entry{
		{Event: live.Event{Kind: live.Received, Request: "rq_before", Server: "X", Time: at}},
		{Event: live.Event{Kind: live.Reset, Server: "X", Time: at, Message: "reset"}},
		{Event: live.Event{Kind: live.Received, Request: "rq_after", Server: "X", Time: at}},
	})
	var got []string
	for _, e := range env.Server.hub.Recent(live.DefaultSize) {
		if !e.Remote || e.Server != "X" {
			t.Errorf("event %s %q held as this server's own", e.Kind, e.Request)
		}
		got = append(got, string(e.Kind)+" "+e.Request)
	}
	if want := []string{"reset ", "received rq_after"}; !slices.Equal(got, want) {
		t.Fatalf("the hub holds %q, want %q", got, want)
	}
}

package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"paytwice/web/live"
	"paytwice/web/room"
	"paytwice/web/room/step"
)

// stepServers starts servers s1, s2, … of one class, each
// listening for step commands, and returns each with a view of its
// events. Holds end only when the test lets them go (no time limit).
func stepServers(t *testing.T, n int) ([]*stepEnv, *class) {
	t.Helper()
	var names []string
	for i := range n {
		names = append(names, fmt.Sprintf("s%d", i+1))
	}
	envs, db := classServers(t, names...)
	var out []*stepEnv
	for _, env := range envs {
		st := env.Server.payments.steps
		st.After = func(time.Duration) <-chan time.Time { return nil }
		// A step sent to another server waits for its event to come back
		// through the database: on a loaded machine under the race
		// detector that took longer than the 5 s a presenter is given.
		st.ForwardWait = 30 * time.Second
		waitUntil(t, "the step commands to be listened to", st.Listening)
		out = append(out, &stepEnv{testEnv: env, sub: env.Server.hub.Subscribe(env.Server.hub.LastSeq())})
	}
	return out, db
}

// stepState is GET /api/step on e.
func (e *stepEnv) stepState() StepState {
	e.t.Helper()
	var s StepState
	e.decodeGet("/api/step", &s)
	return s
}

// waitStepMode waits until e says step mode is on (or off).
func (e *stepEnv) waitStepMode(on bool) {
	e.t.Helper()
	waitUntil(e.t, fmt.Sprintf("step mode on=%v on %s", on, e.Server.cfg.Name), func() bool { return e.stepState().On == on })
}

// waitListed waits until e's step state lists request id at checkpoint.
func (e *stepEnv) waitListed(id, checkpoint string) {
	e.t.Helper()
	waitUntil(e.t, fmt.Sprintf("%s to list %s at %q", e.Server.cfg.Name, id, checkpoint), func() bool {
		return slices.ContainsFunc(e.stepState().Held, func(h HeldRequest) bool { return h.Request == id && h.Checkpoint == checkpoint })
	})
}

// waitHeldHere reads e's events until one of its own requests is held at
// checkpoint, and returns the request's id; the other servers' held
// events, which the relay brings too, are passed over.
func (e *stepEnv) waitHeldHere(checkpoint string) string {
	e.t.Helper()
	return e.waitOwn(fmt.Sprintf("a request held at %q", checkpoint), func(ev live.Event) bool {
		return ev.Kind == step.KindHeld && ev.Message == checkpoint
	})
}

// waitEventHere reads e's events until one of its own of kind, and
// returns its request.
func (e *stepEnv) waitEventHere(kind live.Kind) string {
	e.t.Helper()
	return e.waitOwn(fmt.Sprintf("a %s event", kind), func(ev live.Event) bool { return ev.Kind == kind })
}

// waitOwn reads e's events until one of its own (not relayed from
// another server) matches, and returns its request; what names it in
// the failure.
func (e *stepEnv) waitOwn(what string, match func(live.Event) bool) string {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		entries, err := e.sub.Next(ctx)
		if err != nil {
			e.t.Fatalf("waiting on %s for %s: %v", e.Server.cfg.Name, what, err)
		}
		for _, en := range entries {
			if !en.Remote && match(en.Event) {
				return en.Request
			}
		}
	}
}

// step calls the step API on e as the presenter and insists on want.
func (e *stepEnv) step(path, body string, want int) StepState {
	e.t.Helper()
	method := http.MethodPost
	if path == "/api/step" {
		method = http.MethodPut
	}
	r := e.api(method, path, body)
	if r.Status != want {
		e.t.Fatalf("%s %s %s on %s: %d %s, want %d", method, path, body, e.Server.cfg.Name, r.Status, r.Body, want)
	}
	var s StepState
	if want == http.StatusOK {
		if err := json.Unmarshal(r.Body, &s); err != nil {
			e.t.Fatal(err)
		}
	}
	return s
}

func request(id string) string { return fmt.Sprintf(`{"request":%q}`, id) }

func TestStepModeAcrossServers(t *testing.T) {
	waitsOnRealClocks(t)
	t.Run("turned on through s1, a payment sent to s2 is held; Next sent to s3 moves it on", func(t *testing.T) {
		s, _ := stepServers(t, 3)
		s[0].step("/api/step", `{"on":true}`, http.StatusOK)
		s[1].waitStepMode(true)
		s[2].waitStepMode(true)
		ans := s[1].payAsync("across-1", "A-1")
		id := s[1].waitHeldHere("received")
		s[2].waitListed(id, "received")
		// No request named: the oldest held on any server, as s3 lists it.
		if got := s[2].step("/api/step/next", "", http.StatusOK); got.Released != id {
			t.Fatalf("Next on s3 released %q, want s2's %q", got.Released, id)
		}
		if got := s[1].waitHeldHere("key claimed"); got != id {
			t.Fatalf("held %s at key claimed, want %s", got, id)
		}
		s[2].step("/api/step/next", request(id), http.StatusOK)
		s[1].waitHeldHere("before the gateway")
		s[0].step("/api/step/finish", request(id), http.StatusOK)
		wantStatus(t, ans, http.StatusCreated)
		waitUntil(t, "s1 to list nothing held", func() bool { return len(s[0].stepState().Held) == 0 })
	})
	t.Run("a double-click split across s1 and s2: the first claims, the second gets 409, the first finishes, one charge", func(t *testing.T) {
		s, db := stepServers(t, 2)
		s[1].step("/api/step", `{"on":true}`, http.StatusOK)
		s[0].waitStepMode(true)
		first := s[0].payAsync("dbl-across", "A-5")
		id1 := s[0].waitHeldHere("received")
		s[1].waitListed(id1, "received")
		s[1].step("/api/step/next", request(id1), http.StatusOK) // s1's request, from s2
		s[0].waitHeldHere("key claimed")
		second := s[1].payAsync("dbl-across", "A-5")
		id2 := s[1].waitHeldHere("received")
		s[0].waitListed(id2, "received")
		s[0].step("/api/step/next", request(id2), http.StatusOK) // s2's request, from s1
		s[1].waitHeldHere("answered")                            // its 409, about to be sent
		s[0].step("/api/step/finish", request(id2), http.StatusOK)
		if r := wantStatus(t, second, http.StatusConflict); r.Header.Get("Paytwice-Server") != "s2" {
			t.Errorf("the 409 came from %q, want s2", r.Header.Get("Paytwice-Server"))
		}
		s[1].step("/api/step/finish", request(id1), http.StatusOK)
		wantStatus(t, first, http.StatusCreated)
		if n := countCharges(t, db); n != 1 {
			t.Fatalf("%d charges, want 1", n)
		}
	})
	t.Run("Play on one server lets every server's held requests go", func(t *testing.T) {
		s, _ := stepServers(t, 3)
		s[0].step("/api/step", `{"on":true}`, http.StatusOK)
		s[1].waitStepMode(true)
		a := s[0].payAsync("play-a", "A-2")
		b := s[1].payAsync("play-b", "A-3")
		idA, idB := s[0].waitHeldHere("received"), s[1].waitHeldHere("received")
		s[2].waitListed(idA, "received")
		s[2].waitListed(idB, "received")
		if got := s[2].step("/api/step/play", "", http.StatusOK); got.Released != "2" {
			t.Errorf("Play on s3 reports %q released, want 2", got.Released)
		}
		wantStatus(t, a, http.StatusCreated)
		wantStatus(t, b, http.StatusCreated)
		if !s[2].stepState().On {
			t.Error("Play turned step mode off")
		}
	})
	t.Run("turned off on one server, every server lets its held requests go", func(t *testing.T) {
		s, _ := stepServers(t, 3)
		s[0].step("/api/step", `{"on":true}`, http.StatusOK)
		s[1].waitStepMode(true)
		s[2].waitStepMode(true)
		a := s[1].payAsync("off-a", "A-6")
		b := s[2].payAsync("off-b", "A-7")
		s[1].waitHeldHere("received")
		s[2].waitHeldHere("received")
		if got := s[0].step("/api/step", `{"on":false}`, http.StatusOK); got.On {
			t.Fatal("still on")
		}
		wantStatus(t, a, http.StatusCreated)
		wantStatus(t, b, http.StatusCreated)
		s[1].waitStepMode(false)
		s[2].waitStepMode(false)
	})
	t.Run("a fault aimed through another server: applied by the holder, or refused by it when too late", func(t *testing.T) {
		s, _ := stepServers(t, 2)
		s[0].step("/api/step", `{"on":true}`, http.StatusOK)
		s[1].waitStepMode(true)
		ans := s[1].payAsync("aim-across", "A-8")
		id := s[1].waitHeldHere("received")
		s[0].waitListed(id, "received")
		s[0].step("/api/step/aim", fmt.Sprintf(`{"request":%q,"fault":"response_lost"}`, id), http.StatusOK)
		if got := s[1].waitEventHere(step.KindAimed); got != id {
			t.Fatalf("s2 aimed at %s, want %s", got, id)
		}
		for _, cp := range []string{"key claimed", "before the gateway", "gateway answered"} {
			s[0].step("/api/step/next", request(id), http.StatusOK)
			s[1].waitHeldHere(cp)
		}
		s[0].waitListed(id, "gateway answered")
		s[0].step("/api/step/aim", fmt.Sprintf(`{"request":%q,"fault":"crash_midway"}`, id), http.StatusConflict)
		// Off first: Go's client sends a request with an Idempotency-Key
		// again by itself when its connection closes unanswered.
		s[0].step("/api/step", `{"on":false}`, http.StatusOK)
		if r := <-ans; r.Status != -1 && !isReplay(r) {
			t.Fatalf("the aimed request's first response arrived: %d", r.Status)
		}
	})
	t.Run("Next for a request no server holds is a 404, within the bound", func(t *testing.T) {
		s, _ := stepServers(t, 2)
		s[0].Server.payments.steps.ForwardWait = 0 // the presenter's bound
		s[0].step("/api/step", `{"on":true}`, http.StatusOK)
		s[0].step("/api/step/next", "", http.StatusNotFound)
		s[0].step("/api/step/next", request("rq_nowhere"), http.StatusNotFound)
	})
}

// cutPeers are a server's peers that the test cuts, as a kill -9 would
// for the other servers: from then on the server tells them nothing and
// no longer follows the room, while its held requests stay held. Until
// then it loses every other batch of events the relay sends, as a relay
// that falls behind skips them.
type cutPeers struct {
	room.Peers
	cut  chan struct{}
	sent atomic.Uint64
}

func (c *cutPeers) dead() bool {
	select {
	case <-c.cut:
		return true
	default:
		return false
	}
}

func (c *cutPeers) Notify(ctx context.Context, channel string, payloads ...string) error {
	if c.dead() {
		return errors.New("cut off")
	}
	if channel == room.RelayChannel && c.sent.Add(1)%2 == 0 {
		return nil // lost on the way
	}
	return c.Peers.Notify(ctx, channel, payloads...)
}

func (c *cutPeers) NotifyNumbered(ctx context.Context, channel string, payloads ...string) (uint64, error) {
	if c.dead() {
		return 0, errors.New("cut off")
	}
	if channel == room.RelayChannel && c.sent.Add(1)%2 == 0 {
		return 0, nil // lost on the way
	}
	return c.Peers.NotifyNumbered(ctx, channel, payloads...)
}

func (c *cutPeers) ListenRoom(ctx context.Context, member string, onListen func(), onNotify func(string)) error {
	if c.dead() {
		<-ctx.Done()
		return ctx.Err()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-c.cut:
			cancel()
		case <-ctx.Done():
		}
	}()
	return c.Peers.ListenRoom(ctx, member, onListen, onNotify)
}

// heldIDs is the set of requests e lists as held, by the server that
// holds them.
func heldIDs(e *stepEnv, server string) map[string]bool {
	out := map[string]bool{}
	for _, h := range e.stepState().Held {
		if h.Server == server {
			out[h.Request] = true
		}
	}
	return out
}

// Every server lists exactly what every server holds: as many requests as
// one server's cap allows show on the others' boards although half of its
// events never reach them, and go from them after Play; a server that
// dies with requests held leaves no row behind.
func TestEveryServerListsExactlyWhatIsHeld(t *testing.T) {
	waitsOnRealClocks(t)
	c := newClass(t)
	var cut *cutPeers
	envs := c.servers(func(i int, p room.Peers) room.Peers {
		if i != 1 {
			return p
		}
		cut = &cutPeers{Peers: p, cut: make(chan struct{})}
		return cut
	}, "s1", "s2", "s3")
	var s []*stepEnv
	for _, env := range envs {
		st := env.Server.payments.steps
		st.After = func(time.Duration) <-chan time.Time { return nil }
		// A step sent to another server waits for its event to come back
		// through the database: on a loaded machine under the race
		// detector that took longer than the 5 s a presenter is given.
		st.ForwardWait = 30 * time.Second
		st.Max = 150
		waitUntil(t, "the step commands to be listened to", st.Listening)
		s = append(s, &stepEnv{testEnv: env, sub: env.Server.hub.Subscribe(env.Server.hub.LastSeq())})
	}
	s[0].step("/api/step", `{"on":true}`, http.StatusOK)
	s[1].waitStepMode(true)

	// s2 holds as many as its cap allows; the rest are refused.
	const sent = 170
	answers := make([]<-chan response, sent)
	for i := range answers {
		answers[i] = s[1].payAsync(fmt.Sprintf("k-%d", i), fmt.Sprintf("A-%d", i))
	}
	refused := 0
	waitUntil(t, "the requests beyond the cap to be refused", func() bool {
		for i, a := range answers {
			if a == nil {
				continue
			}
			select {
			case r := <-a:
				if r.Status != http.StatusServiceUnavailable {
					t.Fatalf("request %d answered %d %s while held, want 503 beyond the cap", i, r.Status, r.Body)
				}
				answers[i] = nil
				refused++
			default:
			}
		}
		return refused == sent-150
	})
	waitUntil(t, "s2 to hold its cap", func() bool { return len(heldIDs(s[1], "s2")) == 150 })
	own := heldIDs(s[1], "s2")
	for _, e := range []*stepEnv{s[0], s[2]} {
		waitUntil(t, e.Server.cfg.Name+" to list every request s2 holds", func() bool {
			got := heldIDs(e, "s2")
			return len(got) == len(own) && maps.Equal(got, own)
		})
	}
	if n := len(s[0].stepState().Held); n != 150 {
		t.Fatalf("s1 lists %d held requests, want s2's 150 and nothing else", n)
	}

	// Play through s1: every board empties, and stays empty.
	s[0].step("/api/step/play", "", http.StatusOK)
	for _, e := range s {
		waitUntil(t, e.Server.cfg.Name+" to list nothing after Play", func() bool { return len(e.stepState().Held) == 0 })
	}
	for _, a := range answers {
		if a != nil {
			wantStatus(t, a, http.StatusCreated)
		}
	}

	// s2 holds again, then dies: the others drop its rows.
	more := []<-chan response{s[1].payAsync("dead-1", "D-1"), s[1].payAsync("dead-2", "D-2")}
	for _, e := range []*stepEnv{s[0], s[2]} {
		waitUntil(t, e.Server.cfg.Name+" to list s2's two held requests", func() bool { return len(heldIDs(e, "s2")) == 2 })
	}
	close(cut.cut)
	for _, e := range []*stepEnv{s[0], s[2]} {
		waitUntil(t, e.Server.cfg.Name+" to drop the rows of s2, which died", func() bool { return len(e.stepState().Held) == 0 })
	}
	if n := len(heldIDs(s[1], "s2")); n != 2 {
		t.Fatalf("s2 itself holds %d, want its 2", n)
	}
	s[1].Server.payments.steps.Play()
	for _, a := range more {
		wantStatus(t, a, http.StatusCreated)
	}
}

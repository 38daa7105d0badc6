package step

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"paytwice/pay"
	"paytwice/web/live"
	"paytwice/web/room"
)

// Step mode with several servers on one database. Behind a load balancer
// the presenter's Next goes to whichever server the balancer picks, rarely
// the one whose request waits; and the double-click the lesson is about
// is two requests held on two servers. So:
//
//   - On or off is part of the room (room.go): turned on through any
//     server, every server holds its requests; turned off (or reset),
//     every server lets them go.
//   - Each server's pages list every server's held requests. The held and
//     resumed events of the others arrive through the relay (web/room/relay.go),
//     which hands them to heard before the pages draw them, so a row shows
//     at once; but the relay may skip events when it falls behind, so
//     each server also announces its whole list on the command channel
//     (announce): at once when it changes (at most every
//     stepAnnounceGap), and every stepAnnounceEvery while it holds
//     anything. A server's announced list replaces what the others knew
//     of it; a row no announcement confirmed for stepStaleAfter, or whose
//     server no longer follows the room (it died), is dropped. "The
//     oldest held request" is the oldest of that list, whoever holds it.
//   - A command for a request this server does not hold (Next, Finish,
//     aim) is sent to the others with NOTIFY on a channel of its own,
//     naming the request; the server that holds it acts, and its
//     "resumed" (or "aimed") event, back through the relay, is the answer
//     the API waits for, a couple of seconds at most. Play goes to every
//     server. A server that refuses (a fault aimed too late) says so on
//     the same channel.
//
// A server on its own (SQLite) has no others: everything stays local.

// stepChannel is the channel step mode's commands travel on.
const stepChannel = "paytwice_step"

// stepForwardWait bounds how long a forwarded command waits for the
// server that holds the request to act: time for a notification to go
// out and an event to come back, on a loaded machine.
const stepForwardWait = 2 * time.Second

// stepReplyTimeout bounds the NOTIFY of a command or of a refusal.
const stepReplyTimeout = 2 * time.Second

const (
	// stepAnnounceGap is the least time between two announcements of a
	// server's held list: a burst of holds is told in a few of them.
	stepAnnounceGap = 250 * time.Millisecond
	// stepAnnounceEvery is how often a server that holds requests
	// announces its list even when it did not change: what a lost
	// notification or a skipped event left wrong elsewhere lasts no
	// longer, and the announcement says its server is alive.
	stepAnnounceEvery = 2 * time.Second
	// stepStaleAfter is how long another server's held row lasts without
	// an announcement that lists it.
	stepStaleAfter = 3 * stepAnnounceEvery
	// stepMembersEvery is how often a server that lists other servers'
	// held requests asks which servers still follow the room, so that the
	// rows of one that died go at once.
	stepMembersEvery = time.Second
)

// Step commands, as they travel.
const (
	stepOpNext    = "next"
	stepOpFinish  = "finish"
	stepOpPlay    = "play"
	stepOpAim     = "aim"
	stepOpRefused = "refused" // a holder's refusal, for the server that asked
	stepOpHolding = "holding" // part of a server's held list (announce)
)

// stepCommand is one notification on stepChannel.
type stepCommand struct {
	// From is the sending server's room id (not its name, which two
	// servers may share); a server ignores its own commands. An
	// announcement names the sender too (FromName).
	From     string `json:"from"`
	FromName string `json:"from_name,omitempty"`
	// ID names the command, so that a refusal finds the one waiting.
	ID      string `json:"id"`
	Op      string `json:"op"`
	Request string `json:"request,omitempty"`
	Fault   string `json:"fault,omitempty"`
	// To, Code and Detail are a refusal's: the server that asked, and the
	// problem to answer with.
	To     string   `json:"to,omitempty"`
	Code   pay.Code `json:"code,omitempty"`
	Detail string   `json:"detail,omitempty"`
	// Gen, Part, Parts and Held are an announcement's: the sender's
	// Gen-th list, in Parts notifications, of which this is the Part-th
	// (from 1).
	Gen   uint64     `json:"gen,omitempty"`
	Part  int        `json:"part,omitempty"`
	Parts int        `json:"parts,omitempty"`
	Held  []heldWire `json:"held,omitempty"`
}

// heldWire is a held request as an announcement carries it: with its
// scope, which the API does not show.
type heldWire struct {
	HeldRequest
	Scope string `json:"scope,omitempty"`
}

// remoteHold is another server's held request, as its held event or its
// server's announcement told.
type remoteHold struct {
	HeldRequest
	// holder is the room id of the server that holds it, once an
	// announcement said so ("" when only its event told of it).
	holder string
	// heard is when an event or an announcement last told of it (real
	// time): one that nothing confirms for stepStaleAfter is forgotten.
	heard time.Time
}

// announcing is another server's announcement being received.
type announcing struct {
	gen   uint64
	parts [][]heldWire
	got   int
}

// stepCommands is a server's side of the command channel.
type stepCommands struct {
	peers room.Peers // nil on a server of its own
	// listening is set once the command channel is listened to.
	listening atomic.Bool
	done      chan struct{} // closed when the listener stops

	mu sync.Mutex
	// waiting maps the commands this server sent to what to call with a
	// refusal.
	waiting map[string]func(error)
	// replies counts the refusals being sent.
	replies sync.WaitGroup

	// changed holds a token when this server's held list changed since
	// it was last announced.
	changed chan struct{}
	// announced maps another server's room id to the generation of its
	// latest list applied here, receiving to the one being received;
	// st.mu guards both.
	announced map[string]uint64
	receiving map[string]*announcing
	// holders maps a server's name to its room id, as its latest
	// announcement told: a held event names its server only by name.
	holders map[string]string
}

// Channel is the channel step mode's commands travel on; a server that
// relays listens to it on the relay's connection (relayed), handing each
// notification to Command.
const Channel = stepChannel

// StartCommands listens for the other servers' step commands, when the
// server has peers, and announces its held list to them: on the relay's
// connection if relayed (which calls CommandsListened and Command), else
// on one of their own; it stops with the server.
func (st *Stepper) StartCommands(relayed bool) {
	peers := st.cfg.Peers
	if !peers.Shared() {
		return
	}
	c := &st.commands
	c.peers, c.waiting, c.done = peers, map[string]func(error){}, make(chan struct{})
	st.mu.Lock()
	c.announced, c.receiving, c.holders = map[string]uint64{}, map[string]*announcing{}, map[string]string{}
	st.mu.Unlock()
	var workers sync.WaitGroup
	workers.Go(st.announce)
	workers.Go(st.watchMembers)
	if relayed {
		go func() { workers.Wait(); close(c.done) }()
		return
	}
	workers.Go(func() {
		_ = peers.ListenEach(st.ctx, []string{stepChannel}, func() { c.listening.Store(true) },
			func(_, payload string) { st.Command(payload) })
	})
	go func() { workers.Wait(); close(c.done) }()
}

// listChanged notes that this server's held list changed, for announce;
// st.mu is held.
func (st *Stepper) listChanged() {
	select {
	case st.commands.changed <- struct{}{}:
	default:
	}
}

// announce tells the other servers this server's held list, whole, each
// time it changes (at most every stepAnnounceGap) and every
// stepAnnounceEvery while it is not empty, until the server stops.
func (st *Stepper) announce() {
	ctx := st.ctx
	refresh, stop := st.ticker(stepAnnounceEvery)
	defer stop()
	var gen uint64
	emptyTold := true // the others start knowing nothing of this server
	for {
		select {
		case <-st.commands.changed:
		case <-refresh:
		case <-ctx.Done():
			return
		}
		rows := st.ownRows()
		if len(rows) == 0 && emptyTold {
			continue
		}
		gen++
		err := st.sendList(ctx, gen, rows)
		if err != nil && ctx.Err() == nil {
			st.cfg.Logf("step mode: announcing the held requests: %v", err)
		}
		// An empty list that did not go out is sent again at the next
		// refresh: else the others would list rows that are gone until
		// they go stale.
		emptyTold = len(rows) == 0 && err == nil
		gap := time.NewTimer(stepAnnounceGap)
		select {
		case <-gap.C:
		case <-ctx.Done():
			gap.Stop()
			return
		}
	}
}

// ownRows is this server's held list as an announcement carries it.
func (st *Stepper) ownRows() []heldWire {
	st.mu.Lock()
	defer st.mu.Unlock()
	out := make([]heldWire, 0, len(st.held))
	for _, h := range st.held {
		r := st.rowLocked(h)
		out = append(out, heldWire{HeldRequest: r, Scope: r.Scope})
	}
	return out
}

// sendList announces rows as list gen, in as many notifications as fit.
func (st *Stepper) sendList(ctx context.Context, gen uint64, rows []heldWire) error {
	me := st.cfg.Room.ID()
	var parts [][]heldWire
	size, part := 0, []heldWire(nil)
	// Every notification has room for its envelope; each row is counted
	// at its own size.
	const envelope = 200
	for _, r := range rows {
		b, _ := json.Marshal(r)
		if len(part) > 0 && size+len(b)+1 > room.MaxPayload-envelope {
			parts, part, size = append(parts, part), nil, 0
		}
		part = append(part, r)
		size += len(b) + 1
	}
	parts = append(parts, part) // an empty list is one empty part
	for i, p := range parts {
		b, _ := json.Marshal(stepCommand{From: me, FromName: st.cfg.Name, Op: stepOpHolding, Gen: gen, Part: i + 1, Parts: len(parts), Held: p})
		nctx, cancel := context.WithTimeout(ctx, stepReplyTimeout)
		err := st.commands.peers.Notify(nctx, stepChannel, string(b))
		cancel()
		if err != nil {
			return err
		}
	}
	return nil
}

// holding receives one part of another server's announcement; once every
// part of a list is in, that list replaces what this server knew of the
// sender's held requests.
func (st *Stepper) holding(cmd stepCommand) {
	st.mu.Lock()
	defer st.mu.Unlock()
	c := &st.commands
	if cmd.Parts < 1 || cmd.Part < 1 || cmd.Part > cmd.Parts || cmd.Parts > MaxHeld || cmd.Gen <= c.announced[cmd.From] {
		return
	}
	a := c.receiving[cmd.From]
	if a == nil || a.gen != cmd.Gen {
		if a != nil && a.gen > cmd.Gen {
			return // a part of an older list, after a newer one began
		}
		a = &announcing{gen: cmd.Gen, parts: make([][]heldWire, cmd.Parts)}
		c.receiving[cmd.From] = a
	}
	if len(a.parts) != cmd.Parts || a.parts[cmd.Part-1] != nil {
		return
	}
	a.parts[cmd.Part-1] = append([]heldWire{}, cmd.Held...)
	if a.got++; a.got < cmd.Parts {
		return
	}
	delete(c.receiving, cmd.From)
	c.announced[cmd.From] = cmd.Gen
	name := cmd.FromName
	if name != "" {
		c.holders[name] = cmd.From
	}
	now := st.wallNow()
	var rows []remoteHold
	for _, p := range a.parts {
		for _, w := range p {
			h := w.HeldRequest
			h.Scope = w.Scope
			rows = append(rows, remoteHold{HeldRequest: h, holder: cmd.From, heard: now})
		}
	}
	// The sender's rows, whether an announcement or only an event told of
	// them (those carry its name, not its id), give way to its list.
	before := len(st.others)
	st.others = slices.DeleteFunc(st.others, func(h remoteHold) bool {
		return h.holder == cmd.From || (h.holder == "" && name != "" && h.Server == name)
	})
	if before == 0 && len(rows) == 0 {
		return
	}
	st.others = append(st.others, rows...)
	st.othersChanged()
}

// othersChanged tells this server's pages that the other servers' held
// list changed without an event of theirs saying so; st.mu is held. The
// event is marked remote: it is about the others, and is not relayed.
func (st *Stepper) othersChanged() {
	st.cfg.Hub.PublishRemote(live.Event{Kind: KindHeldList})
}

// watchMembers drops, every stepMembersEvery, the held rows no
// announcement confirmed for stepStaleAfter and those of the servers that
// no longer follow the room (a server that died holds nothing any more,
// and its keys go to the sweepers), and tells the pages when it dropped
// any: the board draws the step bar from a copy it keeps.
func (st *Stepper) watchMembers() {
	ctx := st.ctx
	tick, stop := st.ticker(stepMembersEvery)
	defer stop()
	for {
		select {
		case <-tick:
		case <-ctx.Done():
			return
		}
		st.mu.Lock()
		stale := st.wallNow().Add(-stepStaleAfter)
		n := len(st.others)
		st.others = slices.DeleteFunc(st.others, func(h remoteHold) bool { return h.heard.Before(stale) })
		if len(st.others) != n {
			st.othersChanged()
		}
		any := slices.ContainsFunc(st.others, func(h remoteHold) bool { return h.holder != "" })
		st.mu.Unlock()
		if !any {
			continue
		}
		members, err := st.cfg.Room.Members(ctx)
		if err != nil {
			continue // who is live is unknown: staleness still applies
		}
		live := map[string]bool{}
		for _, m := range members {
			id, _, _ := strings.Cut(m, " ")
			live[id] = true
		}
		st.mu.Lock()
		n = len(st.others)
		st.others = slices.DeleteFunc(st.others, func(h remoteHold) bool { return h.holder != "" && !live[h.holder] })
		if len(st.others) != n {
			st.othersChanged()
		}
		st.mu.Unlock()
	}
}

// WaitCommands returns once the listener, and any refusal being sent,
// have stopped (after shutdown).
func (st *Stepper) WaitCommands() {
	if st.commands.done != nil {
		<-st.commands.done
	}
	st.commands.replies.Wait()
}

// shared reports whether other servers may hold requests.
func (st *Stepper) shared() bool { return st.commands.peers != nil }

// Heard records another server's held or resumed event, before this
// server's pages draw it.
func (st *Stepper) Heard(e live.Event) {
	if e.Request == "" || (e.Kind != KindHeld && e.Kind != KindResumed) {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	holder := st.commands.holders[e.Server]
	if i := slices.IndexFunc(st.others, func(h remoteHold) bool { return h.Request == e.Request }); i >= 0 && st.others[i].holder != "" {
		holder = st.others[i].holder
	}
	st.others = slices.DeleteFunc(st.others, func(h remoteHold) bool { return h.Request == e.Request })
	if e.Kind == KindHeld {
		st.others = append(st.others, remoteHold{HeldRequest: HeldRequest{Request: e.Request, Checkpoint: e.Message,
			Key: e.Key, OrderID: e.OrderID, Scope: e.Scope, Since: e.Time, Server: e.Server}, holder: holder, heard: st.wallNow()})
	}
}

// othersLocked returns the other servers' held requests, but for those
// no announcement confirmed for stepStaleAfter, which watchMembers drops
// at its next tick and tells the pages of; st.mu is held.
func (st *Stepper) othersLocked() []HeldRequest {
	stale := st.wallNow().Add(-stepStaleAfter)
	out := make([]HeldRequest, 0, len(st.others))
	for _, h := range st.others {
		if !h.heard.Before(stale) {
			out = append(out, h.HeldRequest)
		}
	}
	return out
}

// forget drops another server's held request that no server acted on:
// its server is gone, or it went on meanwhile.
func (st *Stepper) forget(id string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.others = slices.DeleteFunc(st.others, func(h remoteHold) bool { return h.Request == id })
}

// target is the request an action names, or the oldest held on any
// server when it names none.
func (st *Stepper) target(id string) (string, error) {
	if id != "" {
		return id, nil
	}
	if held := st.State().Held; len(held) > 0 {
		return held[0].Request, nil
	}
	return "", errNothingHeld
}

// Release is Next (toEnd false) or Finish for the request id, or the
// oldest held: here if this server holds it, else by the server that
// does. It returns the request let go.
func (st *Stepper) Release(ctx context.Context, id string, toEnd bool) (string, error) {
	id, err := st.target(id)
	if err != nil {
		return "", err
	}
	released, err := st.Next(id, toEnd)
	if !st.shared() || pay.ErrorCode(err) != pay.ENOTFOUND {
		return released, err
	}
	op := stepOpNext
	if toEnd {
		op = stepOpFinish
	}
	if err := st.forward(ctx, stepCommand{Op: op, Request: id}, KindResumed); err != nil {
		return "", err
	}
	return id, nil
}

// AimAny aims fault at the request id, or the oldest held, wherever it
// is held.
func (st *Stepper) AimAny(ctx context.Context, id, fault string) error {
	id, err := st.target(id)
	if err == nil {
		err = st.aim(id, fault)
	}
	if !st.shared() || id == "" || pay.ErrorCode(err) != pay.ENOTFOUND {
		return err
	}
	return st.forward(ctx, stepCommand{Op: stepOpAim, Request: id, Fault: fault}, KindAimed)
}

// PlayAll lets every held request run to the end, on every server, and
// returns how many this server saw go: its own, and the others' that its
// pages listed and whose resumed events came back in time.
func (st *Stepper) PlayAll(ctx context.Context) int {
	n := st.Play()
	if !st.shared() {
		return n
	}
	var ids []string
	for _, h := range st.State().Held {
		ids = append(ids, h.Request)
	}
	return n + st.broadcast(ctx, stepCommand{Op: stepOpPlay}, ids)
}

// forward sends cmd to the other servers and waits until the request it
// names shows the event want (the holder acted), a refusal comes back, or
// stepForwardWait passes: then no server holds the request any more, and
// this server's pages stop listing it.
func (st *Stepper) forward(ctx context.Context, cmd stepCommand, want live.Kind) error {
	// A refusal ends the wait, not the sending: it can come back from
	// the holder before the database has answered the NOTIFY that carried
	// the command, and must not make that NOTIFY look failed.
	wait, stopWaiting := context.WithTimeout(ctx, stepForwardWait)
	defer stopWaiting()
	var refused error
	var once sync.Once
	cmd.ID = pay.NewID("sc_")
	sub, err := st.send(ctx, cmd, func(err error) { once.Do(func() { refused = err; stopWaiting() }) })
	if err != nil {
		return err
	}
	defer st.unregister(cmd.ID)
	for {
		entries, err := sub.Next(wait)
		if errors.Is(err, live.ErrTooSlow) {
			sub = st.cfg.Hub.Subscribe(st.cfg.Hub.LastSeq())
			continue
		}
		if err != nil {
			st.commands.mu.Lock() // refused is written under it (command)
			r := refused
			st.commands.mu.Unlock()
			if r != nil {
				return r
			}
			st.forget(cmd.Request)
			return pay.Errorf(pay.ENOTFOUND, "No server let the request %q go within %s: it is not held at a checkpoint (it may be running between two, or finished, or its server stopped).",
				pay.Truncate(cmd.Request, 40), stepForwardWait)
		}
		for _, e := range entries {
			if e.Request == cmd.Request && e.Kind == want {
				return nil
			}
		}
	}
}

// broadcast sends cmd to every other server and waits, for
// stepForwardWait at most, until each request of ids has resumed; it
// returns how many did.
func (st *Stepper) broadcast(ctx context.Context, cmd stepCommand, ids []string) int {
	ctx, cancel := context.WithTimeout(ctx, stepForwardWait)
	defer cancel()
	cmd.ID = pay.NewID("sc_")
	sub, err := st.send(ctx, cmd, nil)
	if err != nil {
		st.cfg.Logf("step mode: %v", err)
		return 0
	}
	defer st.unregister(cmd.ID)
	left, n := slices.Clone(ids), 0
	for len(left) > 0 {
		entries, err := sub.Next(ctx)
		if errors.Is(err, live.ErrTooSlow) {
			sub = st.cfg.Hub.Subscribe(st.cfg.Hub.LastSeq())
			continue
		}
		if err != nil {
			for _, id := range left {
				st.forget(id)
			}
			break
		}
		for _, e := range entries {
			if e.Kind == KindResumed && slices.Contains(left, e.Request) {
				left = slices.DeleteFunc(left, func(id string) bool { return id == e.Request })
				n++
			}
		}
	}
	return n
}

// send registers cmd's refusal handler (unless nil), starts watching this
// server's events and sends cmd: the watch starts before the command
// leaves, so the answer cannot slip past it.
func (st *Stepper) send(ctx context.Context, cmd stepCommand, onRefused func(error)) (*live.Subscription, error) {
	c := &st.commands
	cmd.From = st.cfg.Room.ID()
	if onRefused != nil {
		c.mu.Lock()
		c.waiting[cmd.ID] = onRefused
		c.mu.Unlock()
	}
	sub := st.cfg.Hub.Subscribe(st.cfg.Hub.LastSeq())
	b, _ := json.Marshal(cmd)
	nctx, cancel := context.WithTimeout(ctx, stepReplyTimeout)
	defer cancel()
	if err := c.peers.Notify(nctx, stepChannel, string(b)); err != nil {
		st.unregister(cmd.ID)
		return nil, pay.Errorf(pay.EUNAVAILABLE, "The other servers could not be asked to step (the database did not take the notification); try again.")
	}
	return sub, nil
}

func (st *Stepper) unregister(id string) {
	c := &st.commands
	c.mu.Lock()
	delete(c.waiting, id)
	c.mu.Unlock()
}

// Command carries out another server's command on this server's held
// requests. A request this server does not hold is another's: it stays
// silent. It runs on the listener's goroutine, which may be the relay's:
// it only takes the stepper's lock, and a refusal goes out on a goroutine
// of its own, bounded by stepReplyTimeout.
func (st *Stepper) Command(payload string) {
	var cmd stepCommand
	if err := json.Unmarshal([]byte(payload), &cmd); err != nil {
		st.cfg.Logf("step mode: ignoring a notification that is not a command: %v", err)
		return
	}
	me := st.cfg.Room.ID()
	if cmd.From == me || st.ctx.Err() != nil {
		return // its own, or shutting down: every hold ends anyway
	}
	var err error
	switch cmd.Op {
	case stepOpNext, stepOpFinish:
		_, err = st.Next(cmd.Request, cmd.Op == stepOpFinish)
	case stepOpPlay:
		st.Play()
	case stepOpAim:
		err = st.aim(cmd.Request, cmd.Fault)
	case stepOpHolding:
		st.holding(cmd)
	case stepOpRefused:
		if cmd.To == me {
			c := &st.commands
			c.mu.Lock()
			if f := c.waiting[cmd.ID]; f != nil {
				f(pay.Errorf(cmd.Code, "%s", cmd.Detail))
			}
			c.mu.Unlock()
		}
	}
	if err == nil || pay.ErrorCode(err) == pay.ENOTFOUND {
		return
	}
	b, _ := json.Marshal(stepCommand{From: me, ID: cmd.ID, Op: stepOpRefused, To: cmd.From,
		Code: pay.ErrorCode(err), Detail: pay.ErrorMessage(err)})
	st.commands.replies.Go(func() {
		ctx, cancel := context.WithTimeout(st.ctx, stepReplyTimeout)
		defer cancel()
		if err := st.commands.peers.Notify(ctx, stepChannel, string(b)); err != nil && ctx.Err() == nil {
			st.cfg.Logf("step mode: refusing %s for %s: %v", cmd.Op, cmd.From, err)
		}
	})
}

// CommandsListened notes that the command channel is listened to (by the
// relay, when relayed).
func (st *Stepper) CommandsListened() { st.commands.listening.Store(true) }

// Listening reports whether the command channel is listened to.
func (st *Stepper) Listening() bool { return st.commands.listening.Load() }

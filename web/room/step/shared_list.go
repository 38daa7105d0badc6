package step

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"paytwice/web/live"
	"paytwice/web/room"
)

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

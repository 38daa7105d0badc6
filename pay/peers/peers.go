// Package peers is the seam between the servers of one class: what a
// server needs of the others (one room they all share, the list of those
// that follow it, notifications between them, the wrong presenter tokens
// of each client) and the limits every implementation keeps. The room
// (web/room) consumes it; store/postgres implements it for servers on one
// PostgreSQL database, and web/room's Memory for a server on its own.
// It lives here, under the protocol, so that neither side imports the
// other: the storage layer never depends on the web layer.
package peers

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strconv"
	"strings"
	"time"
)

// Peers is how a server reaches the other servers of its class: one room
// they all share, the list of those that follow it, and channels of
// notifications between them.
type Peers interface {
	// Shared reports whether other servers may be taking part: when it
	// is false this server is the class on its own, and nothing it does
	// needs telling anyone (no relay, no reset barrier, no forwarded step
	// commands).
	Shared() bool

	// LoadRoom reads the room's state (opaque JSON here, "{}" until the
	// first change) and its version.
	LoadRoom(ctx context.Context) (state []byte, version int64, err error)
	// UpdateRoom replaces the room's state with change(old), atomically
	// for every server, and returns the new state and its version; the
	// new version is announced to every follower of the room. An error
	// from change changes nothing and is returned as it is.
	UpdateRoom(ctx context.Context, change func(old []byte) ([]byte, error)) (state []byte, version int64, err error)
	// ListenRoom follows the room until ctx ends: onNotify receives each
	// new version's number, and onListen runs each time following
	// (re)starts, where the caller reloads the room. For as long as it
	// follows, member is among RoomMembers.
	ListenRoom(ctx context.Context, member string, onListen func(), onNotify func(version string)) error
	// RoomMembers lists the members that follow the room now.
	RoomMembers(ctx context.Context) ([]string, error)

	// Notify sends each of payloads, of MaxPayload bytes at most, to
	// every listener of channel, the sender's own included, in the order
	// sent: all of them or, with an error, none (or all, when the answer
	// to a commit that happened was lost). Several sent at once cost the
	// database one commit, and reach each listener together.
	Notify(ctx context.Context, channel string, payloads ...string) error
	// ListenEach calls onNotify with each notification on any of
	// channels, in order, until ctx ends. Notifications sent while it
	// does not listen are lost: onListen runs each time it (re)starts
	// listening.
	ListenEach(ctx context.Context, channels []string, onListen func(), onNotify func(channel, payload string)) error
	// NotifyNumbered is Notify for one batch that takes its place in the
	// class's one order of batches: the batch is given the next number of
	// that order, and the order's generation (see Part), in the
	// transaction that sends it, so that batches commit, and reach every
	// listener, in the order of their numbers. Each
	// payload reaches the listeners after its Part header (see Part), and
	// the batch is kept for ReadNumbered. It returns the batch's number.
	// Payloads are MaxNumberedPayload bytes at most.
	NotifyNumbered(ctx context.Context, channel string, payloads ...string) (n uint64, err error)
	// ReadNumbered returns the kept batches numbered from..to, both
	// included, oldest first, their payloads with their Part headers as a
	// listener received them. The oldest batches are forgotten (at least
	// the last KeptBatches are kept); kept says whether every batch asked
	// for is still kept.
	ReadNumbered(ctx context.Context, from, to uint64) (payloads []string, kept bool, err error)

	// LoadWorkshop reads the workshop's state (opaque JSON here, "{}"
	// until it is first saved); UpdateWorkshop replaces it with
	// change(old), the read and the write under one lock, so that
	// several servers saving at once merge their parts instead of
	// overwriting one another's. Each server saves its changes, so that
	// the workshop outlives a restart and every server's board shows it.
	LoadWorkshop(ctx context.Context) ([]byte, error)
	UpdateWorkshop(ctx context.Context, change func(old []byte) ([]byte, error)) error

	// LoadGuesses reads client's wrong presenter tokens, one count for
	// every server; ok is false when none are recorded.
	LoadGuesses(ctx context.Context, client string) (g Guesses, ok bool, err error)
	// UpdateGuesses replaces client's wrong tokens with change(old, ok),
	// atomically for every server. Records last changed before
	// forgetBefore, of any client, are forgotten first: the caller says
	// when a record is old enough to mean nothing any more.
	UpdateGuesses(ctx context.Context, client string, forgetBefore time.Time, change func(old Guesses, ok bool) Guesses) error
}

// Guesses is what the servers know of one client's wrong presenter
// tokens: Left tries were left at At. How tries come back with time is
// the web package's rule; the peers only keep the count.
type Guesses struct {
	Left float64
	At   time.Time
}

// MaxPayload is the largest notification every Peers carries: PostgreSQL
// refuses NOTIFY payloads of 8000 bytes or more.
const MaxPayload = 7999

// StreamEpochHeader names, on an event stream's answer, the epoch that
// the stream's event ids carry (the life of the server that numbers
// them): paytwice cluster's front door sends a page resuming from those
// ids back to that server while it runs.
const StreamEpochHeader = "Paytwice-Stream-Epoch"

// FrontDoorHeader carries the mark of paytwice cluster's front door on
// every request it forwards: a server believes the front door's
// X-Forwarded-For only on a request that carries its mark.
const FrontDoorHeader = "Paytwice-Front-Door"

// PresenterSeenHeader is on a server's answer to a request that carried
// the front door's mark and came from the presenter, recognised by the
// cookie or the right token in the header: the door takes it off and
// keeps the presenter's reserve of connections for that client address,
// and of requests in flight for that request's header token (by its
// SHA-256; never a token sent beside the cookie). The door never compares
// a header token itself: only the servers do, under the limit on wrong
// ones.
const PresenterSeenHeader = "Paytwice-Presenter-Seen"

// PresenterProbePath answers 204 to the presenter and 403 to anyone
// else, and does nothing more: the front door asks it, with a request's
// header token and client address, before it forwards the first request
// of a connection past its address's share, so that a made-up token gets
// that connection nothing but a wrong guess counted against its address.
const PresenterProbePath = "/api/presenter"

// PresenterCookie names the cookie the presenter's link sets.
const PresenterCookie = "paytwice_presenter"

// PresenterCookieValue is the presenter cookie's value for token: an
// HMAC of the token under key (a fixed key when key is empty), so the
// cookie never holds the token itself, and every server of a class (and
// the cluster's front door) started with the same token and key
// recognises the same cookie. "" when there is no token.
func PresenterCookieValue(token string, key []byte) string {
	if token == "" {
		return ""
	}
	if len(key) == 0 {
		key = []byte("paytwice presenter cookie key")
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte("paytwice presenter cookie\x00"))
	m.Write([]byte(token))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// KeptBatches is how many of the newest numbered batches every Peers
// keeps for ReadNumbered: a listener that lost its connection reads back
// what it missed from them, rather than start again from nothing.
const KeptBatches = 4096

// MaxNumberedPayload is the largest payload NotifyNumbered takes: the
// Part header it puts before it must fit in a notification too.
const MaxNumberedPayload = MaxPayload - maxPartHeader

// maxPartHeader bounds a Part header: "#", four numbers and their
// separators.
const maxPartHeader = 96

// Part is the header NotifyNumbered puts before each payload of a batch:
// the batch's number N, the payload's place I among its K payloads (from
// 1), and the generation G of the order that numbered it. A listener that
// sees a number skip, or a batch end early, knows exactly what it missed
// and reads it back (ReadNumbered).
//
// The generation changes when the order's numbers may have gone back: a
// crash of PostgreSQL can forget the newest batches, which listeners
// heard already, and number the next ones again. The numbers alone would
// then name two batches; with the generation a place heard before the
// crash is never taken for the batch numbered like it after (a page
// resuming from it on a server that heard nothing across the crash is
// drawn whole). Generations grow: a later one is greater. 0 is a header
// that does not say (a server of an earlier version).
type Part struct{ N, I, K, G uint64 }

// Header is p as it starts a payload: "#N I/K gG ", or "#N I/K " when G
// is 0.
func (p Part) Header() string {
	h := "#" + strconv.FormatUint(p.N, 10) + " " + strconv.FormatUint(p.I, 10) + "/" + strconv.FormatUint(p.K, 10) + " "
	if p.G != 0 {
		h += "g" + strconv.FormatUint(p.G, 10) + " "
	}
	return h
}

// After reports whether p comes after q in the class's order of numbers
// (the generations aside: a listener compares those apart).
func (p Part) After(q Part) bool { return p.N > q.N || p.N == q.N && p.I > q.I }

// Follows reports whether p is the part right after q: q's batch's next
// payload, or, after q's batch's last, the next batch's first.
func (p Part) Follows(q Part) bool {
	if q.I < q.K {
		return p.N == q.N && p.I == q.I+1
	}
	return p.N == q.N+1 && p.I == 1
}

// CutPart reads the Part header at the start of payload and returns the
// rest; ok is false for a payload without one (Notify's).
func CutPart(payload string) (p Part, rest string, ok bool) {
	s, found := strings.CutPrefix(payload, "#")
	if !found {
		return Part{}, payload, false
	}
	num, s, found1 := strings.Cut(s, " ")
	part, s, found2 := strings.Cut(s, " ")
	i, k, found3 := strings.Cut(part, "/")
	if !found1 || !found2 || !found3 {
		return Part{}, payload, false
	}
	var err1, err2, err3 error
	p.N, err1 = strconv.ParseUint(num, 10, 64)
	p.I, err2 = strconv.ParseUint(i, 10, 64)
	p.K, err3 = strconv.ParseUint(k, 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || p.N == 0 || p.I == 0 || p.I > p.K {
		return Part{}, payload, false
	}
	// The generation, when the header has one: no payload starts with
	// "g" (the relay's start with "pt1 " or "{").
	if g, rest, found := strings.Cut(s, " "); found && strings.HasPrefix(g, "g") {
		gen, err := strconv.ParseUint(g[1:], 10, 64)
		if err != nil || gen == 0 {
			return Part{}, payload, false
		}
		p.G, s = gen, rest
	}
	return p, s, true
}

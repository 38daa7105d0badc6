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

// Package room is the classroom's control plane, apart from HTTP: the
// room the presenter sets for the whole class (State: the fault switches,
// the lab, the lesson, the clock's offset, step mode, the reset under way)
// and its rules, this server's copy of it (Room: one immutable snapshot
// at a time, which requests read instead of keeping copies), what one
// server needs of the other servers of its class, and the stand-in for
// them when a server is on its own.
//
// Peers is the one seam to the other servers, declared in pay/peers so
// that the stores need not import this package. *postgres.DB implements it
// for several servers on one PostgreSQL database (the room's row, the
// sessions that follow it, LISTEN/NOTIFY, the wrong-token count) and
// asserts so at compile time; Memory implements it in this process, for a
// server on its own, and for tests that run several servers in one
// process without a database.
package room

import "paytwice/pay/peers"

// Peers is how a server reaches the other servers of its class. The
// seam is declared in pay/peers, where the stores that implement it can
// see it without importing the web layer.
type Peers = peers.Peers

// Guesses is what the servers know of one client's wrong presenter
// tokens (peers.Guesses).
type Guesses = peers.Guesses

// MaxPayload is the largest notification every Peers carries
// (peers.MaxPayload).
const MaxPayload = peers.MaxPayload

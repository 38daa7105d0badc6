package room

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Room is this server's copy of the room every server of the class shares:
// one immutable snapshot of the state S at a time, the newest this server
// has applied. Every change goes through Change, which is atomic for every
// server (the peers' UpdateRoom), applies the result here at once, and
// reaches the other servers through their followers (Start).
//
// S is stored as JSON; a field the stored copy lacks keeps its default,
// and one it does not know is ignored (a newer server may have written
// it).
type Room[S any] struct {
	peers    Peers
	defaults func() S
	// onApply runs at each new snapshot applied, in version order, with
	// the room's lock held: what mirrors the room in this server follows
	// it there.
	onApply func(old, next S)
	logf    func(format string, args ...any)

	// id names this server to the other servers (a reset's barrier, step
	// commands): a random id, as two servers may have been given the same
	// name; member is what the followers list names it by.
	id, member string

	// snapshot is state, for Load to read without the lock: requests read
	// the room on every payment.
	snapshot atomic.Pointer[S]

	mu      sync.Mutex
	state   S
	version int64 // of state; a state of an older version is not applied
	// changed is closed, and replaced, at each new snapshot applied.
	changed chan struct{}

	followed chan struct{} // closed when the follower stops
}

// New is a room on peers, at defaults() until the room is loaded. id is
// this server's random id and name its name for the logs; onApply runs at
// each snapshot applied, logf reports what goes wrong in the background.
func New[S any](peers Peers, id, name string, defaults func() S, onApply func(old, next S), logf func(string, ...any)) *Room[S] {
	member := id
	if name != "" {
		member += " " + name
	}
	r := &Room[S]{peers: peers, defaults: defaults, onApply: onApply, logf: logf, id: id, member: member,
		state: defaults(), changed: make(chan struct{}), followed: make(chan struct{})}
	first := r.state
	r.snapshot.Store(&first)
	return r
}

// ID is this server's random id in the room.
func (r *Room[S]) ID() string { return r.id }

// Load returns the snapshot this server applied last. It takes no lock.
func (r *Room[S]) Load() S { return *r.snapshot.Load() }

// Watch returns the snapshot this server applied last, its version, and
// a channel closed when a newer one is applied.
func (r *Room[S]) Watch() (S, int64, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.state, r.version, r.changed
}

// Changed is closed when a snapshot newer than the current one is applied.
func (r *Room[S]) Changed() <-chan struct{} {
	_, _, ch := r.Watch()
	return ch
}

// Members lists the members (id, then name) of the servers that follow
// the room now, this one included.
func (r *Room[S]) Members(ctx context.Context) ([]string, error) { return r.peers.RoomMembers(ctx) }

// loadTimeout bounds how long a starting server waits for the room's state
// before serving with the defaults; the follower catches up later.
const loadTimeout = 10 * time.Second

// Start adopts the room's current state, so that a server that joins a
// class late shows the class's switches from its first request, and
// follows the room's changes until ctx ends.
func (r *Room[S]) Start(ctx context.Context) {
	loadCtx, cancel := context.WithTimeout(ctx, loadTimeout)
	r.Reload(loadCtx)
	cancel()
	go func() {
		defer close(r.followed)
		_ = r.peers.ListenRoom(ctx, r.member, func() { r.Reload(ctx) }, func(payload string) {
			// A version this server has already applied (its own change,
			// or one a reload found) needs no reload.
			if v, err := strconv.ParseInt(payload, 10, 64); err == nil && v <= r.appliedVersion() {
				return
			}
			r.Reload(ctx)
		})
	}()
}

// Wait returns once the follower has stopped (after Start's ctx ended).
func (r *Room[S]) Wait() { <-r.followed }

func (r *Room[S]) appliedVersion() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.version
}

// Reload reads the room and applies it if it is newer. After a
// reconnection it is how a server catches up on the changes it was not
// told about; before drawing another server's news of a change, how it
// makes sure it holds that change.
func (r *Room[S]) Reload(ctx context.Context) {
	b, v, err := r.peers.LoadRoom(ctx)
	if err == nil {
		var next S
		if next, err = r.decode(b); err == nil {
			r.apply(next, v)
			return
		}
	}
	if ctx.Err() == nil {
		r.logf("room: %v", err)
	}
}

// decode reads the stored copy over the defaults.
func (r *Room[S]) decode(b []byte) (S, error) {
	s := r.defaults()
	if err := json.Unmarshal(b, &s); err != nil {
		var zero S
		return zero, fmt.Errorf("room state %.60q: %w", b, err)
	}
	return s, nil
}

// apply makes next this server's room unless it already holds a newer
// one.
func (r *Room[S]) apply(next S, version int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if version <= r.version {
		return
	}
	old := r.state
	r.state, r.version = next, version
	r.snapshot.Store(&next)
	close(r.changed)
	r.changed = make(chan struct{})
	r.onApply(old, next)
}

// Change applies edit to the room's current state, atomically for every
// server of the class, applies the result here, and returns the state
// before and after: the caller publishes the event that describes the
// change. An error from edit changes nothing and is returned as it is.
func (r *Room[S]) Change(ctx context.Context, edit func(*S) error) (old, next S, err error) {
	if err := ctx.Err(); err != nil {
		return old, next, err
	}
	_, version, err := r.peers.UpdateRoom(ctx, func(b []byte) ([]byte, error) {
		var err error
		if old, err = r.decode(b); err != nil {
			return nil, err
		}
		next = old
		if err := edit(&next); err != nil {
			return nil, err
		}
		return json.Marshal(next)
	})
	if err != nil {
		return old, next, err
	}
	r.apply(next, version)
	return old, next, nil
}

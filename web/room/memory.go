package room

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"paytwice/pay/peers"
)

// roomChannel is the channel UpdateRoom announces versions on, apart from
// the channels of Notify: a room's follower hears only its room.
const roomChannel = "\x00room"

// MemoryPeers is Peers within one process: the room's state and the
// notifications live in its memory. Every server given the same
// MemoryPeers is in the same class.
type MemoryPeers struct {
	shared bool
	// kept is where the room survives a restart (Stored); nil keeps it
	// in memory only. loaded says the room was read from it.
	kept   RoomStore
	loaded bool

	mu      sync.Mutex
	state   []byte
	version int64
	// listeners are the ListenEach and ListenRoom calls under way.
	listeners map[*listener]struct{}
	guesses   map[string]Guesses
	workshop  []byte
	// numbered holds the newest numbered batches (NotifyNumbered), the
	// payloads of batch n at numbered[n-firstNumbered]; lastNumbered is
	// the newest batch's number.
	numbered      [][]string
	firstNumbered uint64
	lastNumbered  uint64
	// generation is the order's generation (peers.Part): memory forgets
	// no batch, so it stays 1 for m's life.
	generation uint64
}

// Memory is the peers of a server on its own: the room is its memory, and
// there is nobody else to tell.
func Memory() *MemoryPeers { return newMemory(false) }

// SharedMemory is the peers of several servers in one process, sharing
// one room and the notifications between them as servers on one
// PostgreSQL database do: tests use it to run a class without a database.
func SharedMemory() *MemoryPeers { return newMemory(true) }

// RoomStore is where a server on its own keeps the room between two
// runs: its SQLite file (store.DB). The state is opaque JSON, saved with
// its version.
type RoomStore interface {
	LoadRoom(ctx context.Context) (state []byte, version int64, err error)
	SaveRoom(ctx context.Context, state []byte, version int64) error
	LoadWorkshop(ctx context.Context) ([]byte, error)
	UpdateWorkshop(ctx context.Context, change func(old []byte) ([]byte, error)) error
}

// Stored is the peers of a server on its own whose room is kept in st: a
// restarted server carries on with the chapter, step mode, the switches,
// the clock's offset and the count of resets it had, as servers on
// PostgreSQL do. Each change is saved before it is applied.
func Stored(st RoomStore) *MemoryPeers {
	m := newMemory(false)
	m.kept = st
	return m
}

func newMemory(shared bool) *MemoryPeers {
	return &MemoryPeers{shared: shared, state: []byte("{}"), workshop: []byte("{}"), listeners: map[*listener]struct{}{}, guesses: map[string]Guesses{}, generation: 1}
}

// Shared reports whether the servers given m are a class of several.
func (m *MemoryPeers) Shared() bool { return m.shared }

// LoadRoom returns the room's state and version.
func (m *MemoryPeers) LoadRoom(ctx context.Context) ([]byte, int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.loadLocked(ctx); err != nil {
		return nil, 0, err
	}
	return m.state, m.version, nil
}

// loadLocked reads the kept room once, the first time it is needed.
func (m *MemoryPeers) loadLocked(ctx context.Context) error {
	if m.kept == nil || m.loaded {
		return nil
	}
	state, version, err := m.kept.LoadRoom(ctx)
	if err != nil {
		return fmt.Errorf("room: reading the kept room: %w", err)
	}
	m.state, m.version, m.loaded = state, version, true
	return nil
}

// UpdateRoom replaces the room's state with change(old) under m's lock,
// and announces the new version to the room's followers.
func (m *MemoryPeers) UpdateRoom(ctx context.Context, change func(old []byte) ([]byte, error)) ([]byte, int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.loadLocked(ctx); err != nil {
		return nil, 0, err
	}
	next, err := change(m.state)
	if err != nil {
		return nil, 0, err
	}
	if m.kept != nil {
		// Saved first: a change the file does not hold would be gone
		// after a restart while the class saw it made.
		if err := m.kept.SaveRoom(ctx, next, m.version+1); err != nil {
			return nil, 0, fmt.Errorf("room: keeping the room: %w", err)
		}
	}
	m.state = next
	m.version++
	m.sendLocked(roomChannel, strconv.FormatInt(m.version, 10))
	return next, m.version, nil
}

// ListenRoom follows the room as member until ctx ends.
func (m *MemoryPeers) ListenRoom(ctx context.Context, member string, onListen func(), onNotify func(version string)) error {
	return m.listen(ctx, member, []string{roomChannel}, onListen, func(_, v string) { onNotify(v) })
}

// RoomMembers lists the members of the ListenRoom calls under way.
func (m *MemoryPeers) RoomMembers(ctx context.Context) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for l := range m.listeners {
		if l.member != "" {
			out = append(out, l.member)
		}
	}
	return out, nil
}

// Notify hands each of payloads to every listener of channel.
func (m *MemoryPeers) Notify(ctx context.Context, channel string, payloads ...string) error {
	if len(payloads) == 0 {
		return nil
	}
	for _, payload := range payloads {
		if len(payload) > MaxPayload {
			return fmt.Errorf("room: notify %s: payload of %d bytes is over the limit of %d", channel, len(payload), MaxPayload)
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, payload := range payloads {
		m.sendLocked(channel, payload)
	}
	return nil
}

// NotifyNumbered gives the batch the next number and hands its payloads,
// after their Part headers, to every listener of channel, under the lock
// that orders every notification.
func (m *MemoryPeers) NotifyNumbered(ctx context.Context, channel string, payloads ...string) (uint64, error) {
	if len(payloads) == 0 {
		return 0, nil
	}
	for _, payload := range payloads {
		if len(payload) > peers.MaxNumberedPayload {
			return 0, fmt.Errorf("room: notify %s: payload of %d bytes is over the limit of %d", channel, len(payload), peers.MaxNumberedPayload)
		}
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lastNumbered++
	n := m.lastNumbered
	parts := make([]string, len(payloads))
	for i, payload := range payloads {
		parts[i] = peers.Part{N: n, I: uint64(i + 1), K: uint64(len(payloads)), G: m.generation}.Header() + payload
	}
	if m.firstNumbered == 0 {
		m.firstNumbered = n
	}
	m.numbered = append(m.numbered, parts)
	if len(m.numbered) > peers.KeptBatches {
		drop := len(m.numbered) - peers.KeptBatches
		clear(m.numbered[:drop])
		m.numbered = m.numbered[drop:]
		m.firstNumbered += uint64(drop)
	}
	for _, part := range parts {
		m.sendLocked(channel, part)
	}
	return n, nil
}

// ReadNumbered returns the kept batches from..to.
func (m *MemoryPeers) ReadNumbered(ctx context.Context, from, to uint64) ([]string, bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	kept := m.firstNumbered != 0 && from >= m.firstNumbered
	var out []string
	for n := max(from, m.firstNumbered); n <= min(to, m.lastNumbered) && n >= m.firstNumbered && m.firstNumbered != 0; n++ {
		out = append(out, m.numbered[n-m.firstNumbered]...)
	}
	return out, kept || from > to, nil
}

// ListenEach listens on channels until ctx ends.
func (m *MemoryPeers) ListenEach(ctx context.Context, channels []string, onListen func(), onNotify func(channel, payload string)) error {
	return m.listen(ctx, "", channels, onListen, onNotify)
}

// LoadWorkshop returns the workshop's state: the kept one, when m keeps
// the room in a file.
func (m *MemoryPeers) LoadWorkshop(ctx context.Context) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if m.kept != nil {
		return m.kept.LoadWorkshop(ctx)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.workshop, nil
}

// UpdateWorkshop replaces the workshop's state with change(old), in the
// file when m keeps the room there; servers sharing m take turns.
func (m *MemoryPeers) UpdateWorkshop(ctx context.Context, change func(old []byte) ([]byte, error)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if m.kept != nil {
		return m.kept.UpdateWorkshop(ctx, change)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	next, err := change(m.workshop)
	if err != nil {
		return err
	}
	m.workshop = append([]byte(nil), next...)
	return nil
}

// LoadGuesses returns client's wrong tokens.
func (m *MemoryPeers) LoadGuesses(ctx context.Context, client string) (Guesses, bool, error) {
	if err := ctx.Err(); err != nil {
		return Guesses{}, false, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	g, ok := m.guesses[client]
	return g, ok, nil
}

// UpdateGuesses replaces client's wrong tokens with change(old, ok) under
// m's lock, having forgotten the records older than forgetBefore.
func (m *MemoryPeers) UpdateGuesses(ctx context.Context, client string, forgetBefore time.Time, change func(old Guesses, ok bool) Guesses) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for c, g := range m.guesses {
		if g.At.Before(forgetBefore) {
			delete(m.guesses, c)
		}
	}
	old, ok := m.guesses[client]
	m.guesses[client] = change(old, ok)
	return nil
}

// sendLocked queues a notification for every listener of channel; m.mu
// is held, so notifications keep the order they were sent in.
func (m *MemoryPeers) sendLocked(channel, payload string) {
	for l := range m.listeners {
		if l.channels[channel] {
			l.queue(notification{channel, payload})
		}
	}
}

// listen registers a listener, then hands it its notifications on this
// goroutine, in order, until ctx ends.
func (m *MemoryPeers) listen(ctx context.Context, member string, channels []string, onListen func(), onNotify func(channel, payload string)) error {
	l := &listener{member: member, channels: map[string]bool{}, wake: make(chan struct{}, 1)}
	for _, c := range channels {
		l.channels[c] = true
	}
	m.mu.Lock()
	m.listeners[l] = struct{}{}
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.listeners, l)
		m.mu.Unlock()
	}()
	if onListen != nil {
		onListen()
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-l.wake:
		}
		for _, n := range l.take() {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			onNotify(n.channel, n.payload)
		}
	}
}

type notification struct{ channel, payload string }

// listener is one ListenEach or ListenRoom call: its notifications wait in
// its queue, so that a sender never waits for a slow listener (nor for one
// that is itself sending, under m.mu).
type listener struct {
	member   string
	channels map[string]bool

	mu      sync.Mutex
	pending []notification
	wake    chan struct{} // holds a token while pending may be non-empty
}

func (l *listener) queue(n notification) {
	l.mu.Lock()
	l.pending = append(l.pending, n)
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default: // a wake is pending already
	}
}

func (l *listener) take() []notification {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.pending
	l.pending = nil
	return out
}

var _ Peers = (*MemoryPeers)(nil)

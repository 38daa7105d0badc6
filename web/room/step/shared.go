package step

import (
	"sync"
	"sync/atomic"
	"time"

	"paytwice/pay"
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
// out and an event to come back, on a loaded machine. The relay gives its
// own notifications as long; at 2 s a loaded machine (a test run under
// the race detector) answered a step that was held "not held".
const stepForwardWait = 5 * time.Second

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
	// Only bounds a Next or Finish to one order's requests (a student's
	// step).
	Only *Only `json:"only,omitempty"`
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

// CommandsListened notes that the command channel is listened to (by the
// relay, when relayed).
func (st *Stepper) CommandsListened() { st.commands.listening.Store(true) }

// Listening reports whether the command channel is listened to.
func (st *Stepper) Listening() bool { return st.commands.listening.Load() }

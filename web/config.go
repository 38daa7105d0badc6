package web

import (
	"log"
	"net"
	"time"

	"paytwice/pay/check"
	"paytwice/web/room"
	"paytwice/web/workshop"
)

// Config holds the server's settings.
type Config struct {
	// Retention is how long done keys are kept before pruning.
	Retention time.Duration
	// LockTimeout is how long a key may stay started before the sweeper
	// asks the gateway what happened.
	LockTimeout time.Duration
	// GatewayTimeout bounds one request's work after its claim. It must be
	// shorter than LockTimeout, or the sweeper could close a key whose
	// request is still talking to the gateway.
	GatewayTimeout time.Duration
	// PruneEvery and SweepEvery are the background jobs' periods.
	PruneEvery, SweepEvery time.Duration
	// BodyTimeout bounds how long a request may take to send its body
	// (DefaultBodyTimeout when zero); headers have their own limit in
	// the http.Server.
	BodyTimeout time.Duration
	// PresenterToken, when set, is required to change switches or reset.
	PresenterToken string
	// PresenterCookieKey signs the presenter's cookie; nil means the
	// cookie is derived from the token alone, so that it still counts
	// after a restart and on every server given the same token.
	PresenterCookieKey []byte
	// Ledger holds the simulated gateway's charges: the payments store
	// itself when it holds the ledger's tables too, or, as main gives it, a
	// database of its own, as a real provider's database is not ours: its
	// commits then run in parallel with ours. It is required.
	Ledger Ledger
	// Peers are the other servers of the class (web/room): a PostgreSQL
	// database that several servers share, or nil for a server on its own
	// (room.Memory()).
	Peers room.Peers
	// StepLimit is how long step mode may hold a request at one checkpoint
	// (default 2 minutes).
	StepLimit time.Duration
	// ListenAddr is the address clients reach the server at: the
	// listener's real address (net.Listener.Addr), or the front door's
	// when the server sits behind a proxy (-public-addr): the board and
	// /join show only addresses that open this app. Unset, the address
	// each connection arrived on stands in for it.
	ListenAddr net.Addr
	// Listener is the listener's own address when ListenAddr is another
	// (-public-addr): the workshop never calls this machine at either.
	Listener net.Addr
	// BehindFrontDoor says that the connections from this machine come
	// from paytwice cluster's front door, whose X-Forwarded-For names the
	// client: the presenter's wrong-token limit counts by it.
	BehindFrontDoor bool
	// FrontDoorMark is the secret the front door sends in FrontDoorHeader
	// on every request it forwards: X-Forwarded-For is believed only on a
	// request that carries it, so a client that reaches this server's port
	// directly cannot choose the address it is counted by. Empty: never.
	FrontDoorMark string
	// Command is what was run to start this server ("paytwice" when
	// empty): the board tells a presenter whose room cannot reach it how
	// to start it again.
	Command string
	// Logger receives unexpected errors; nil means the standard logger.
	Logger *log.Logger
	// Limits are the room's fair shares per client address: streams,
	// request rates, the timeline's shares (fairshare.go). Zero fields
	// mean DefaultLimits'.
	Limits Limits
	// LimitsClock is the time the fair shares' buckets and tables count
	// by; nil means the wall clock. (The room's clock, which the
	// presenter may move, is never it.)
	LimitsClock func() time.Time
	// BoardClock is the real time that paces the board's shares and its
	// busy mode (web/board); nil means the wall clock. Like LimitsClock,
	// never the room's clock.
	BoardClock func() time.Time
	// BarrierClock is the real time a reset's barrier is bounded by
	// (web/room's Barriers); nil means the wall clock. Never the room's
	// clock either.
	BarrierClock func() time.Time
	// BYOCClock is the real time the room's proxy (/byo/, web/byoc.go)
	// grades students' clients by: their waits between retries (rules 7
	// and 8), their budget (rule 9), when an action is over; nil means
	// the wall clock. Never the room's clock, which would stretch a wait by the
	// presenter's week.
	BYOCClock func() time.Time
	// Name names this server among the several that may share one
	// database (-name): the timeline says which server handled each
	// request. "" for a server on its own.
	Name string
	// WorkshopAllow are the networks the workshop may call students'
	// endpoints on (-workshop-allow); nil means the private networks this
	// server is served on (web/workshop).
	WorkshopAllow []workshop.Allow
	// workshopBooksCap bounds each student's gateway's books
	// (workshop.DefaultBooksCap): tests reach it with a few charges.
	workshopBooksCap int
	// workshopTune adjusts every workshop run's checker: tests shorten
	// the runs with it.
	workshopTune func(*check.Config)
	// workshopRestoreWait bounds the start's read of the kept workshop
	// (defaultWorkshopRestoreWait): tests shorten it.
	workshopRestoreWait time.Duration
	// workshopSaveEvery is the least time between two saves of the
	// workshop (workshop.DefaultSaveEvery): tests lengthen it to show what
	// does not wait for a save.
	workshopSaveEvery time.Duration
}

// withDefaults fills unset fields.
func (c Config) withDefaults() Config {
	if c.Retention <= 0 {
		c.Retention = 24 * time.Hour
	}
	if c.LockTimeout <= 0 {
		c.LockTimeout = 30 * time.Second
	}
	if c.GatewayTimeout <= 0 || c.GatewayTimeout >= c.LockTimeout {
		c.GatewayTimeout = c.LockTimeout / 2
	}
	if c.PruneEvery <= 0 {
		c.PruneEvery = time.Minute
	}
	if c.SweepEvery <= 0 {
		c.SweepEvery = 5 * time.Second
	}
	if c.BodyTimeout <= 0 {
		c.BodyTimeout = DefaultBodyTimeout
	}
	if c.Logger == nil {
		c.Logger = log.Default()
	}
	c.Limits = c.Limits.withDefaults()
	return c
}

// defaultWorkshopRestoreWait bounds how long a slow store holds the
// server's start while it reads the kept workshop.
const defaultWorkshopRestoreWait = 2 * time.Second

// restoreWait is how long the server's start waits for the kept workshop.
func (cfg Config) restoreWait() time.Duration {
	if cfg.workshopRestoreWait > 0 {
		return cfg.workshopRestoreWait
	}
	return defaultWorkshopRestoreWait
}

package web

import (
	"context"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"testing"

	"paytwice/sim"
	"paytwice/store"
	"paytwice/store/postgres"
	"paytwice/store/postgres/pgtest"
	"paytwice/web/room"
)

// A class is several servers in this process that share one database and
// one room, as servers behind a load balancer do. Its database is the
// PostgreSQL one PAYTWICE_TEST_POSTGRES names, each server with
// connections of its own; without it, or with PAYTWICE_TEST_PEERS=memory,
// it is one SQLite file every server writes to, with room.SharedMemory()
// peers, so that the room, relay, barrier and step mode tests run without
// PostgreSQL too (CI runs them both ways).
type class struct {
	t *testing.T
	// Store and Peers are what every server writes to and listens on,
	// for the test to read and to act on directly.
	Store
	room.Peers
	ledger Ledger

	url string       // PostgreSQL: the database
	pg  *postgres.DB // PostgreSQL: the first server's connections

	sqlite *store.DB  // SQLite: every server's store
	clock  *sim.Clock // SQLite: the store's clock, which the first server gets

	started []*testEnv // the servers started so far
}

// newClass is a class on a new database: PostgreSQL when the test has
// one, else SQLite with memory peers.
func newClass(t *testing.T) *class {
	t.Helper()
	if os.Getenv("PAYTWICE_TEST_POSTGRES") != "" && os.Getenv("PAYTWICE_TEST_PEERS") != "memory" {
		return newPostgresClass(t)
	}
	clock := sim.NewClock(nil)
	db := MustOpenDB(t, clock.Now)
	return &class{t: t, Store: db, Peers: room.SharedMemory(), ledger: db, sqlite: db, clock: clock}
}

// waitsOnRealClocks marks a test whose time goes in waiting on real
// clocks (PostgreSQL's, a lease's, a reset's bound, a relay's tick), not
// in work: it runs beside the other such tests (t.Parallel), each on its
// own servers and its own database file or PostgreSQL database, so that
// their waits overlap. TestMain lets more of them run at once than the
// machine has cores.
func waitsOnRealClocks(t *testing.T) {
	t.Helper()
	t.Parallel()
}

// newPostgresClass is a class on a new PostgreSQL database, for what only
// PostgreSQL does (its connections, its sessions, its rows).
func newPostgresClass(t *testing.T) *class {
	t.Helper()
	return &class{t: t, url: pgtest.NewDatabase(t)}
}

// postgresOnly skips t, a part of a test that acts on PostgreSQL itself,
// on a class without it.
func (c *class) postgresOnly(t *testing.T) {
	t.Helper()
	if c.url == "" {
		t.Skip("acts on PostgreSQL's own connections or rows; run with PAYTWICE_TEST_POSTGRES")
	}
}

// server starts one more server of the class with cfg, in this process,
// behind its own listener on 127.0.0.1 and on the real clock. wrap, unless
// nil, wraps its peers.
func (c *class) server(cfg Config, wrap func(room.Peers) room.Peers) *testEnv {
	t := c.t
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = log.New(io.Discard, "", 0)
	}
	var db Store
	var clock *sim.Clock
	closeDB := func() {}
	if c.url != "" {
		clock = sim.NewClock(nil)
		pg, err := postgres.Open(context.Background(), c.url, postgres.Options{Now: clock.Now, MaxConns: 4})
		if err != nil {
			t.Fatal(err)
		}
		if c.pg == nil {
			c.pg, c.Store, c.Peers, c.ledger = pg, pg, pg, pg
		}
		db, cfg.Ledger, cfg.Peers, closeDB = pg, pg, pg, func() { pg.Close() }
	} else {
		clock, c.clock = c.clock, nil
		if clock == nil {
			clock = sim.NewClock(nil)
		}
		db, cfg.Ledger, cfg.Peers = c.sqlite, c.sqlite, c.Peers
	}
	if wrap != nil {
		cfg.Peers = wrap(cfg.Peers)
	}
	srv := NewServer(cfg, db, clock)
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { srv.Close(); hs.Close(); closeDB() })
	env := &testEnv{t: t, tb: t, URL: hs.URL, Server: srv, HTTP: hs}
	c.join(env)
	return env
}

// join waits until env's relay and those of the servers started before
// it have each heard another: a relay that has heard none keeps its
// events to itself, so a test that starts a second server and pays at
// once would otherwise see a gap where it expects the payment.
func (c *class) join(env *testEnv) {
	c.t.Helper()
	c.started = append(c.started, env)
	if env.Server.servers.relay == nil || len(c.started) < 2 {
		return
	}
	for _, e := range c.started {
		if e.Server.servers.relay != nil {
			waitUntil(c.t, "the relays to hear each other", func() bool { return e.Server.servers.relay.Others() > 0 })
		}
	}
}

// servers starts one server of the class per name, with wrap (unless nil)
// wrapping the i-th server's peers, and waits until every relay listens.
func (c *class) servers(wrap func(i int, peers room.Peers) room.Peers, names ...string) []*testEnv {
	c.t.Helper()
	var envs []*testEnv
	for i, name := range names {
		var wrapOne func(room.Peers) room.Peers
		if wrap != nil {
			wrapOne = func(p room.Peers) room.Peers { return wrap(i, p) }
		}
		envs = append(envs, c.server(Config{Name: name}, wrapOne))
	}
	for _, e := range envs {
		e.Server.live() // the projector draws from its start on
		waitUntil(c.t, "the relay to listen", func() bool { return e.Server.servers.relay.Listening() > 0 })
	}
	return envs
}

// classServers starts one server per name on a new class, and waits
// until every relay listens.
func classServers(t *testing.T, names ...string) ([]*testEnv, *class) {
	t.Helper()
	c := newClass(t)
	return c.servers(nil, names...), c
}

// books counts the local charges and the gateway's.
func (c *class) books() (local, gateway int) {
	c.t.Helper()
	ctx := context.Background()
	local, err := c.CountCharges(ctx)
	if err == nil {
		gateway, err = c.ledger.CountGatewayCharges(ctx)
	}
	if err != nil {
		c.t.Fatal(err)
	}
	return local, gateway
}

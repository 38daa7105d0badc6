package main

import (
	"cmp"
	"context"
	"errors"
	"time"

	"paytwice/pay"
	"paytwice/store"
	"paytwice/store/postgres"
	"paytwice/web"
	"paytwice/web/room"
)

// stores are the payments store and the gateway's ledger a server runs on,
// and its peers: the database itself when other servers may share it.
type stores struct {
	db     web.Store
	ledger web.Ledger
	// peers are the other servers of the class. When they are shared, a
	// started key found at start-up may belong to a live request of
	// theirs, so it is left to the sweepers' lock timeout.
	peers   room.Peers
	closers []func() error
}

func (s *stores) Close() error {
	var errs []error
	for i := len(s.closers) - 1; i >= 0; i-- {
		errs = append(errs, s.closers[i]())
	}
	return errors.Join(errs...)
}

// What a SQLite file is to a server, for holdSQLiteFile.
const (
	paymentsRole = "payments"
	ledgerRole   = "ledger"
)

// openStores opens what -db and -gateway-db name. A postgres:// or
// postgresql:// URL is a PostgreSQL database, anything else a SQLite
// file. The gateway's ledger defaults to a file next to a SQLite -db, and
// to the schema "gateway" of a PostgreSQL -db, so that every server on
// that database asks the same gateway; there one store holds both.
func openStores(ctx context.Context, dbArg, gatewayArg string, now func() time.Time, syncMode string) (*stores, error) {
	s := &stores{}
	if postgres.IsURL(dbArg) {
		// A ledger in the same database is the same store, with one
		// pool: a payment's claim, gateway record and save run on the
		// pool's connections in turn, and a busy server keeps 16
		// backends at work, not 33, which took PostgreSQL more CPU per
		// payment (README, "Where the rest goes on PostgreSQL").
		together := gatewayArg == "" || gatewayArg == dbArg
		schema := pay.SchemaPayments
		if together {
			schema = pay.SchemaAll
		}
		db, err := postgres.Open(ctx, dbArg, postgres.Options{Now: now, Schema: schema})
		if err != nil {
			return nil, err
		}
		s.db, s.peers = db, db
		s.closers = append(s.closers, db.Close)
		if together {
			s.ledger = db
			return s, nil
		}
	} else {
		release, err := holdSQLiteFile(dbArg, paymentsRole)
		if err != nil {
			return nil, err
		}
		s.closers = append(s.closers, release)
		db, err := store.Open(dbArg, store.Options{Now: now, Synchronous: syncMode, Schema: pay.SchemaPayments})
		if err != nil {
			s.Close()
			return nil, err
		}
		s.db, s.peers = db, room.Stored(db)
		s.closers = append(s.closers, db.Close)
		gatewayArg = cmp.Or(gatewayArg, gatewayPath(dbArg))
	}
	if postgres.IsURL(gatewayArg) {
		ledger, err := postgres.Open(ctx, gatewayArg, postgres.Options{Now: now, Schema: pay.SchemaLedger})
		if err != nil {
			s.Close()
			return nil, err
		}
		s.ledger = ledger
		s.closers = append(s.closers, ledger.Close)
	} else {
		if gatewayArg != dbArg { // a file held already as the payments'
			release, err := holdSQLiteFile(gatewayArg, ledgerRole)
			if err != nil {
				s.Close()
				return nil, err
			}
			s.closers = append(s.closers, release)
		}
		ledger, err := store.Open(gatewayArg, store.Options{Now: now, Synchronous: syncMode, Schema: pay.SchemaLedger})
		if err != nil {
			s.Close()
			return nil, err
		}
		s.ledger = ledger
		s.closers = append(s.closers, ledger.Close)
	}
	return s, nil
}

//go:build unix

package main

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// holdSQLiteFile takes an exclusive lock on a SQLite file for as long as
// this server runs, or refuses to start when another process holds it.
// A second server on the same payments file would sweep the first one's
// live claims at start-up, as if they had been left by a crash, and a
// retry on such a key would run a second time. A second server on the
// same gateway ledger (-gateway-db) would find the first one's charges
// under keys of its own: its sweeper would record a charge its own
// payment never made. role names what the file is to this server
// (ledgerRole for the gateway's). The lock is flock(2), which SQLite's
// own fcntl locks do not see; the kernel drops it when the process ends,
// however it ends.
func holdSQLiteFile(path, role string) (release func() error, err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			if role == ledgerRole {
				return nil, fmt.Errorf("another paytwice server is using %s as its gateway's ledger: a SQLite ledger serves one server at a time. "+
					"Give this server a -gateway-db of its own, or run several servers on one PostgreSQL database (-db postgres://…, or paytwice cluster), which share one gateway there", path)
			}
			return nil, fmt.Errorf("another paytwice server is serving %s: a SQLite file serves one server at a time. "+
				"To run several servers on one database, give them a PostgreSQL database (-db postgres://…, or paytwice cluster)", path)
		}
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	return f.Close, nil // closing the file lets the lock go
}

// Package store keeps paytwice's durable state in one SQLite file: the
// idempotency keys, the charges, and the simulated gateway's own ledger.
//
// Every write goes through a single writer goroutine that owns the only
// write connection. It takes whatever claims and completions are queued,
// runs each inside its own savepoint of one IMMEDIATE transaction and
// commits them together (group commit): many requests share one fsync,
// and each caller is answered only after the commit that holds its work.
// Reads use a separate pool of query-only connections, and responses of
// completed keys, which never change, are cached in memory for replays.
//
// DB implements pay.Storage. Each claim writes its own fencing token on
// the key row, and Complete and Release act only WHERE claim = ?. Any
// other backend of the protocol must pass the contract in
// store/storetest, as TestContract makes this one do.
package store

// Package check tests an HTTP endpoint's Idempotency-Key behaviour from
// outside: it sends real requests (replays, the same key with another
// body, storms of one key, lost responses, two callers with one key…),
// counts the side effects through an oracle the endpoint cannot fake (a
// listing of its own charges, or the books of the simulated gateway it
// charges through), and gives each case a verdict. Every request it sends
// is recorded in a history, which it then checks with Porcupine for
// linearizability against a model of idempotent payments: per action at
// most one effect, every answer to one key the same, and a request that
// got no answer an operation whose outcome is unknown. Saved histories,
// and paytwice's own timeline export, are checked the same way (Verify).
//
// It imports nothing of paytwice: it is a client of any API.
package check

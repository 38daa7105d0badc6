// Package workshop is the room's "bring your own endpoint" mode: each
// student writes POST /v1/payments in any language, runs it on their own
// computer and charges through a simulated gateway of their own that the
// room serves; the room runs the conformance checker (pay/check) against
// the student's endpoint, with that gateway's books as the oracle, and
// keeps a scoreboard of the runs.
//
// The room calls addresses a student chose, so every connection it makes
// goes through a Guard: only networks the presenter allows, never this
// server itself nor a cloud's metadata address, checked on the address
// actually dialled (after the name is resolved), with no redirect
// followed. Runs take turns in a bounded queue, one per student at a
// time. Its state (the students, their latest runs, the hidden rows, the
// presenter's faults) is merged into a Keeper, the room's store, at most
// once per SaveEvery while changes come, each server writing only its
// students and the settings its presenter changed; it is restored when a
// server starts: a run the server stopped during is shown as
// interrupted. Each student's gateway writes its charges through to
// Books, the same store, before it answers, and reads them back there. It knows nothing of HTTP frameworks or
// pages: web serves it.
package workshop

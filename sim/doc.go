// Package sim holds everything paytwice simulates: the clock a presenter
// can warp, the fake payment gateway with its switches, the fault plan,
// the retrying client, the backoff schedule maths and the thundering-herd
// simulation. It knows nothing of HTTP frameworks or templates.
package sim

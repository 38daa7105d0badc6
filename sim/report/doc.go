// Package report turns the parameters of the backoff and herd simulations
// (a query string, or the CLI's flags passed as one) into checked inputs
// and their reports: the numbers that the /backoff and /herd pages draw,
// that GET /api/backoff and GET /api/herd answer as JSON, and that
// paytwice backoff and paytwice herd print. A wrong parameter is a
// FieldErrors that names the field, so every caller words it the same way.
// It depends on sim only: no HTTP framework, template or database.
package report

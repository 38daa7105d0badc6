// Package proxy grades the client side of idempotency. A Proxy is a
// reverse proxy that a developer points a client at: it forwards the
// client's requests to a payments API, injects the failures the article
// describes (a connection that never happens, a request that fails
// halfway, a lost response, 409, 429 and 503 with Retry-After, a 400 or
// 422 no retry can fix), records every attempt, groups the attempts into
// actions, and judges the client against ten rules: one key per action,
// the same key and body on every retry, no retry of what a retry cannot
// fix, jittered backoff, Retry-After honoured, a budget kept, and a lost
// response that ends with one charge on the API's own books.
//
// The package knows no HTTP framework and no page: it is an
// http.Handler, a recorder and a grader. The command and the classroom
// show what it records.
package proxy

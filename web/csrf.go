package web

import (
	"net/http"

	"paytwice/pay"
)

// crossOriginGuard refuses state-changing requests (POST, PUT, PATCH,
// DELETE) that a browser marks as coming from another origin, with
// Sec-Fetch-Site or, in older browsers, Origin. A page elsewhere can then
// neither pay nor flip a switch with a visitor's cookies. Requests that
// carry neither header (curl, Go, scripts) are not from a browser page and
// pass, so the API stays scriptable.
func crossOriginGuard(h http.Handler) http.Handler {
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		status, body := problemBody(r, pay.Errorf(pay.EFORBIDDEN,
			"This %s came from a page of another site, and was refused: changes are only accepted from paytwice's own pages or from clients that are not browsers.", r.Method))
		w.Header().Set("Content-Type", "application/problem+json")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.WriteHeader(status)
		_, _ = w.Write(body)
	}))
	return cop.Handler(h)
}

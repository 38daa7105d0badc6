package web

import (
	"net/http"
	"net/url"

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

// changedBy names, for the timeline, where a change of the room came from:
// the page whose button sent it (the Referer, which the Referrer-Policy
// sends to this origin only), else the JSON API.
func changedBy(r *http.Request) string {
	ref := r.Referer()
	if ref == "" {
		return "JSON API"
	}
	u, err := url.Parse(ref)
	if err != nil || u.Host != r.Host {
		return "JSON API"
	}
	switch u.Path {
	case "/board":
		return "the board"
	case "/":
		return "the checkout page"
	}
	return "a page"
}

package web

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"net/url"

	"github.com/labstack/echo/v4"

	"paytwice/pay"
)

// How a presenter proves who they are when Config.PresenterToken is set:
// a script sends the header, a browser carries the cookie that opening
// /board?token=<token> sets.
const (
	PresenterHeader = "X-Presenter-Token"
	PresenterCookie = "paytwice_presenter"
)

// isPresenter reports whether r comes from the presenter. With no token
// configured everybody is (a learner alone with the app needs every
// switch). With one, the request must carry it in the header or in the
// cookie; a cookie on a state-changing request from another site does not
// count, so a page elsewhere cannot flip switches with the presenter's
// browser.
func (s *Server) isPresenter(r *http.Request) bool {
	want := s.cfg.PresenterToken
	if want == "" {
		return true
	}
	if tokenEqual(r.Header.Get(PresenterHeader), want) {
		return true
	}
	c, err := r.Cookie(PresenterCookie)
	if err != nil || !tokenEqual(c.Value, want) {
		return false
	}
	return isSafeMethod(r.Method) || !crossSite(r)
}

// tokenEqual compares in constant time; hashing first hides the length
// too.
func tokenEqual(got, want string) bool {
	if got == "" {
		return false
	}
	g, w := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(g[:], w[:]) == 1
}

func isSafeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// crossSite reports whether the browser says r was sent by a page of
// another origin.
func crossSite(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site == "cross-site" || site == "same-site" {
		return true
	}
	if origin := r.Header.Get("Origin"); origin != "" {
		u, err := url.Parse(origin)
		return err != nil || u.Host != r.Host
	}
	return false
}

// presenterOnly refuses a request that does not come from the presenter
// with 403 problem+json.
func (s *Server) presenterOnly(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if !s.isPresenter(c.Request()) {
			return pay.Errorf(pay.EFORBIDDEN, "Only the presenter may change this. Send the header %s: <token>, or open the board with the presenter's link.", PresenterHeader)
		}
		return next(c)
	}
}

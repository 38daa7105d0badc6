package web

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"paytwice/pay"
	"paytwice/pay/check"
	"paytwice/pay/peers"
)

// How a presenter proves who they are when Config.PresenterToken is set:
// a script sends the header, a browser carries the cookie that opening
// /board?token=<token> sets.
const (
	PresenterHeader = check.PresenterHeader
	PresenterCookie = "paytwice_presenter"
)

// isPresenter reports whether r comes from the presenter. With no token
// configured everybody is (a learner alone with the app needs every
// switch). With one, the request must carry it in the header or carry the
// cookie that the presenter's link set; a cookie on a state-changing
// request from another site does not count, so a page elsewhere cannot
// flip switches with the presenter's browser. A client slowed down for
// wrong tokens is not the presenter until its wait is over.
func (s *Server) isPresenter(r *http.Request) bool {
	ok, _ := s.presenterAuth(r)
	return ok
}

// presenterAuth is isPresenter, and how long the client must wait before
// its header token is looked at again (0 unless it sent too many wrong
// ones).
func (s *Server) presenterAuth(r *http.Request) (ok bool, wait time.Duration) {
	if m, _ := r.Context().Value(presenterMemoKey{}).(*presenterMemo); m != nil {
		if !m.done {
			m.ok, m.wait = s.presenterAuthOnce(r)
			m.done = true
		}
		return m.ok, m.wait
	}
	return s.presenterAuthOnce(r)
}

// presenterMemo keeps one request's answer to presenterAuth. Several
// layers ask who sent a request (the fair-share limits, the stream
// slots, the handler); a token in the header must be looked at, and a
// wrong one counted, once per request however many of them ask.
type presenterMemo struct {
	done bool
	ok   bool
	wait time.Duration
}

type presenterMemoKey struct{}

// rememberPresenter gives each request its presenterMemo; it runs before
// every middleware that asks.
func rememberPresenter(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		c.SetRequest(r.WithContext(context.WithValue(r.Context(), presenterMemoKey{}, &presenterMemo{})))
		return next(c)
	}
}

func (s *Server) presenterAuthOnce(r *http.Request) (ok bool, wait time.Duration) {
	want := s.cfg.PresenterToken
	if want == "" {
		return true, 0
	}
	if got := r.Header.Get(PresenterHeader); got != "" {
		return s.tryPresenterToken(r, got)
	}
	c, err := r.Cookie(PresenterCookie)
	if err != nil || !s.presenter.cookieOK(c.Value) {
		return false, 0
	}
	return isSafeMethod(r.Method) || !crossSite(r), 0
}

// tryPresenterToken checks a token a client offers (in the header or in
// the presenter's link) under the per-client limit on wrong guesses: the
// look at the client's count, the comparison and the counting of a wrong
// token are one step (guessTry), so that however many guesses arrive at
// once, on however many servers, no more are compared than the limit.
func (s *Server) tryPresenterToken(r *http.Request, got string) (ok bool, wait time.Duration) {
	return s.guessTry(r.Context(), s.clientIP(r), func() bool { return tokenEqual(got, s.cfg.PresenterToken) })
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

// presenterAuthState is what the server keeps to recognise the presenter.
type presenterAuthState struct {
	// cookie is the presenter cookie's value: an HMAC of the token (under
	// Config.PresenterCookieKey when one is given), so the cookie never
	// holds the token itself (a copied cookie cannot be typed in as the
	// header or the link). It depends on nothing but the token and the
	// key: a server restarted with the same token, or the servers of
	// paytwice cluster started on the same address, recognise the cookie
	// the presenter already has, and a new token ends every old cookie.
	cookie string
	tries  *guessLimiter
}

func newPresenterAuth(token string, key []byte) presenterAuthState {
	st := presenterAuthState{tries: newGuessLimiter(time.Now)}
	if token == "" {
		return st
	}
	if len(key) == 0 {
		key = []byte("paytwice presenter cookie key")
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte("paytwice presenter cookie\x00"))
	m.Write([]byte(token))
	st.cookie = base64.RawURLEncoding.EncodeToString(m.Sum(nil))
	return st
}

func (p presenterAuthState) cookieOK(v string) bool {
	return p.cookie != "" && subtle.ConstantTimeCompare([]byte(v), []byte(p.cookie)) == 1
}

// presenterCookieFor is the cookie that marks r's browser as the
// presenter's: HttpOnly, same-site only, Secure when served over TLS.
// The app does not sit behind a proxy it trusts, so it believes r.TLS
// only, never X-Forwarded-Proto.
func (s *Server) presenterCookieFor(r *http.Request) *http.Cookie {
	return &http.Cookie{Name: PresenterCookie, Value: s.presenter.cookie, Path: "/",
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil, MaxAge: 12 * 3600}
}

// clientIP is the address the connection comes from: what the guess
// limit counts by. Behind paytwice cluster's front door every connection
// comes from the door on this machine, which says whom it came from in
// X-Forwarded-For (its own last entry); without that, one student's wrong
// guesses would slow the whole room down, the presenter included.
func (s *Server) clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	if s.cfg.BehindFrontDoor && isLoopbackHost(host) && fromFrontDoor(r, s.cfg.FrontDoorMark) {
		if hops := r.Header.Values("X-Forwarded-For"); len(hops) > 0 {
			entries := strings.Split(hops[len(hops)-1], ",")
			if last := strings.TrimSpace(entries[len(entries)-1]); last != "" {
				return last
			}
		}
	}
	return host
}

// FrontDoorHeader carries paytwice cluster's front door's mark.
const FrontDoorHeader = peers.FrontDoorHeader

// fromFrontDoor reports whether r carries the front door's mark.
func fromFrontDoor(r *http.Request, mark string) bool {
	got := r.Header.Get(FrontDoorHeader)
	return mark != "" && subtle.ConstantTimeCompare([]byte(got), []byte(mark)) == 1
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
		if err := s.requirePresenter(c, notPresenter); err != nil {
			return err
		}
		return next(c)
	}
}

// notPresenter is presenterOnly's refusal.
const notPresenter = "Only the presenter may change this. Send the header " + PresenterHeader + ": <token>, or open the board with the presenter's link."

// requirePresenter is nil for the presenter; anyone else gets 429 while
// slowed down for wrong tokens, or a 403 saying refusal.
func (s *Server) requirePresenter(c echo.Context, refusal string) error {
	ok, wait := s.presenterAuth(c.Request())
	if wait > 0 {
		return tooManyGuesses(c, wait)
	}
	if !ok {
		return pay.Errorf(pay.EFORBIDDEN, "%s", refusal)
	}
	return nil
}

// tooManyGuesses refuses a client that sent too many wrong presenter
// tokens, with the Retry-After of its next try.
func tooManyGuesses(c echo.Context, wait time.Duration) error {
	secs := int64((wait + time.Second - 1) / time.Second)
	c.Response().Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	return pay.Errorf(pay.ETOOMANYGUESSES, "Too many wrong presenter tokens from your address: the next try is looked at in %d %s.", secs, plural(int(secs), "second", "seconds"))
}

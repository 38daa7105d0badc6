package web

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
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
	"paytwice/web/room"
)

// How a presenter proves who they are when Config.PresenterToken is set:
// a script sends the header, a browser carries the cookie that opening
// /board?token=<token> sets.
const (
	PresenterHeader = check.PresenterHeader
	PresenterCookie = peers.PresenterCookie
)

// isPresenter reports whether r comes from the presenter. With no token
// configured everybody is (a learner alone with the app needs every
// switch). With one, the request must carry it in the header or carry the
// cookie that the presenter's link set; a cookie on a state-changing
// request from another site does not count, so a page elsewhere cannot
// flip switches with the presenter's browser. A client slowed down for
// wrong tokens is not the presenter until its wait is over.
func (g *presenterGate) isPresenter(r *http.Request) bool {
	ok, _, _ := g.presenterAuth(r)
	return ok
}

// presenterAuth is isPresenter, and how long the client must wait before
// its header token is looked at again (0 unless it sent too many wrong
// ones); err is errGuessesUnavailable when the token could not be looked
// at because the count of wrong tokens could not be read.
func (g *presenterGate) presenterAuth(r *http.Request) (ok bool, wait time.Duration, err error) {
	if m, _ := r.Context().Value(presenterMemoKey{}).(*presenterMemo); m != nil {
		if !m.done {
			m.ok, m.wait, m.err = g.presenterAuthOnce(r)
			m.done = true
		}
		return m.ok, m.wait, m.err
	}
	return g.presenterAuthOnce(r)
}

// presenterMemo keeps one request's answer to presenterAuth. Several
// layers ask who sent a request (the fair-share limits, the stream
// slots, the handler); a token in the header must be looked at, and a
// wrong one counted, once per request however many of them ask.
type presenterMemo struct {
	done bool
	ok   bool
	wait time.Duration
	err  error
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

func (g *presenterGate) presenterAuthOnce(r *http.Request) (ok bool, wait time.Duration, err error) {
	if g.token == "" {
		return true, 0, nil
	}
	if got := r.Header.Get(PresenterHeader); got != "" {
		return g.tryPresenterToken(r, got)
	}
	c, err := r.Cookie(PresenterCookie)
	if err != nil || !g.cookieOK(c.Value) {
		return false, 0, nil
	}
	return isSafeMethod(r.Method) || !crossSite(r), 0, nil
}

// tryPresenterToken checks a token a client offers (in the header or in
// the presenter's link) under the per-client limit on wrong guesses: the
// look at the client's count, the comparison and the counting of a wrong
// token are one step (guessTry), so that however many guesses arrive at
// once, on however many servers, no more are compared than the limit.
// When that count cannot be read the token is not taken (err).
//
// With the count shared by several servers (a transaction each), a token
// the count took from the same address within the last minute is taken
// from memory (knownTokens), while this server's mirror of the count says
// the address has tries left; anything else goes to the count as before.
func (g *presenterGate) tryPresenterToken(r *http.Request, got string) (ok bool, wait time.Duration, err error) {
	ip := g.clientIP(r)
	shared := g.guesses.Shared()
	if shared && g.tries.wait(ip) == 0 && g.known.match(ip, got) {
		return true, 0, nil
	}
	ok, wait, err = g.guessTry(r.Context(), ip, func() bool { return tokenEqual(got, g.token) })
	if ok && shared {
		g.known.remember(ip, got)
	}
	return ok, wait, err
}

// mayBePresenter says, from memory and at once, whether r may be the
// presenter's: it carries the presenter's cookie, or a token in the header
// while its address has tries left (by this server's count, which the
// shared one can only be below). Such a token is still to be looked at,
// and counted when wrong, by presenterAuth: what lets it past the early
// refusal is bounded by the limit on wrong tokens.
func (g *presenterGate) mayBePresenter(r *http.Request) bool {
	if c, err := r.Cookie(PresenterCookie); err == nil && g.cookieOK(c.Value) {
		return true
	}
	return offeredToken(r) != "" && g.tries.wait(g.clientIP(r)) == 0
}

// mayBePresenterLink is mayBePresenter for the presenter's link alone
// (GET /board?token=): its token is looked at, and counted when wrong, by
// the board's handler (handleBoard). The link is how the presenter's
// browser gets its cookie, so it must get in from an address whose
// students have used up its shares, as the presenter's requests do.
func (g *presenterGate) mayBePresenterLink(r *http.Request) bool {
	return r.Header.Get(PresenterHeader) == "" && presenterLinkToken(r) != "" && g.tries.wait(g.clientIP(r)) == 0
}

// offeredToken is the presenter token r offers: in the header, or in the
// presenter's link.
func offeredToken(r *http.Request) string {
	if got := r.Header.Get(PresenterHeader); got != "" {
		return got
	}
	return presenterLinkToken(r)
}

// presenterLinkToken is the token of the presenter's link, GET
// /board?token=, and "" for any other request.
func presenterLinkToken(r *http.Request) string {
	if r.Method != http.MethodGet || r.URL.Path != "/board" {
		return ""
	}
	return r.URL.Query().Get("token")
}

// headerTokenRight compares r's header token (or its presenter link's)
// with the presenter's, in
// constant time and without the shared count, for the places held at
// accept and in flight (address_bounds.go): looked says whether it was
// compared at all (a header, and tries left on this server), so that the
// caller counts a wrong one whose answer then differs from a right one's
// (headerTokenWrong).
func (g *presenterGate) headerTokenRight(r *http.Request) (right, looked bool) {
	got := offeredToken(r)
	if g.token == "" || got == "" || g.tries.wait(g.clientIP(r)) > 0 {
		return false, false
	}
	return tokenEqual(got, g.token), true
}

// headerTokenWrong counts a wrong header token on this server alone, for
// a refusal that a right token would not have had (address_bounds.go):
// the comparison told the client something, so it costs a try here. The
// shared count does not hear of it: a transaction for each would be what
// a guesser wants the server to spend.
func (g *presenterGate) headerTokenWrong(r *http.Request) {
	g.tries.fail(g.clientIP(r))
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

// presenterGate recognises the presenter and names the address a request
// comes from. It holds the token, the cookie derived from it, the count of
// wrong tokens, and how to read a front door's forwarded address; the
// handler groups take its checks (isPresenter, presenterOnly, clientIP)
// as functions.
type presenterGate struct {
	// token is Config.PresenterToken: "" means everybody is the presenter.
	token string
	// cookie is the presenter cookie's value: an HMAC of the token (under
	// Config.PresenterCookieKey when one is given), so the cookie never
	// holds the token itself (a copied cookie cannot be typed in as the
	// header or the link). It depends on nothing but the token and the
	// key: a server restarted with the same token, or the servers of
	// paytwice cluster started on the same address, recognise the cookie
	// the presenter already has, and a new token ends every old cookie.
	cookie string
	// tries counts wrong tokens per client address; guesses shares the
	// count with the other servers of the class (guesslimit.go).
	tries   *guessLimiter
	guesses guessBook
	// known keeps where the shared count took the right token lately, so
	// that the presenter's next requests cost no transaction each.
	known *knownTokens
	// turns and dbSlots bound what guesses hold of the shared count's
	// database: one per address, guessDBSlots in all (guessTry).
	turns   guessTurns
	dbSlots chan struct{}
	// guessTimeout bounds a look at the shared count; 0 means the
	// constant guessTimeout.
	guessTimeout time.Duration
	// behindFrontDoor and frontDoorMark are Config's: whether, and on
	// which mark, X-Forwarded-For is believed (clientIP).
	behindFrontDoor bool
	frontDoorMark   string
	logf            func(format string, args ...any)
}

// guessBook is the part of room.Peers the count of wrong tokens uses.
type guessBook interface {
	Shared() bool
	UpdateGuesses(ctx context.Context, client string, forgetBefore time.Time, change func(old room.Guesses, ok bool) room.Guesses) error
}

func newPresenterGate(cfg Config, guesses guessBook, logf func(format string, args ...any)) *presenterGate {
	token, key := cfg.PresenterToken, cfg.PresenterCookieKey
	st := &presenterGate{token: token, tries: newGuessLimiter(time.Now), known: newKnownTokens(time.Now), guesses: guesses,
		dbSlots:         make(chan struct{}, guessDBSlots),
		behindFrontDoor: cfg.BehindFrontDoor, frontDoorMark: cfg.FrontDoorMark, logf: logf}
	st.cookie = peers.PresenterCookieValue(token, key)
	return st
}

func (p *presenterGate) cookieOK(v string) bool {
	return p.cookie != "" && subtle.ConstantTimeCompare([]byte(v), []byte(p.cookie)) == 1
}

// presenterCookieFor is the cookie that marks r's browser as the
// presenter's: HttpOnly, same-site only, Secure when served over TLS.
// The app does not sit behind a proxy it trusts, so it believes r.TLS
// only, never X-Forwarded-Proto.
func (g *presenterGate) presenterCookieFor(r *http.Request) *http.Cookie {
	return &http.Cookie{Name: PresenterCookie, Value: g.cookie, Path: "/",
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil, MaxAge: 12 * 3600}
}

// clientIP is the address the connection comes from: what the guess
// limit counts by. Behind paytwice cluster's front door every connection
// comes from the door on this machine, which says whom it came from in
// X-Forwarded-For (its own last entry); without that, one student's wrong
// guesses would slow the whole room down, the presenter included.
func (g *presenterGate) clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	if g.behindFrontDoor && isLoopbackHost(host) && fromFrontDoor(r, g.frontDoorMark) {
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
func (g *presenterGate) presenterOnly(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if err := g.requirePresenter(c, notPresenter); err != nil {
			return err
		}
		return next(c)
	}
}

// notPresenter is presenterOnly's refusal.
const notPresenter = "Only the presenter may change this. Send the header " + PresenterHeader + ": <token>, or open the board with the presenter's link."

// requirePresenter is nil for the presenter; anyone else gets 429 while
// slowed down for wrong tokens, or a 403 saying refusal.
func (g *presenterGate) requirePresenter(c echo.Context, refusal string) error {
	ok, wait, err := g.presenterAuth(c.Request())
	if err != nil {
		return err
	}
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

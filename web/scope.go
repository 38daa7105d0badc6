package web

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"paytwice/pay"
)

// sessionCookie holds a browser's demo account id.
const sessionCookie = "paytwice_session"

// AnonymousScope is shared by every API caller that sends neither an
// Authorization header nor a session cookie, on a server without a
// presenter token (a learner alone with it). In a class (a presenter
// token is set) such callers are told apart by their address instead
// (anonymousByAddress): one student who learns another's key can send
// nothing under it.
const AnonymousScope = "anonymous"

// anonymousPrefix starts the scope of a caller with no credential in a
// class: the hash of its address follows.
const anonymousPrefix = "anonymous:"

// anonymousScopeKey is the request context's key for the scope of a
// caller with no credential.
type anonymousScopeKey struct{}

// anonymousByAddress gives, in a class, each address its own scope for
// the requests that carry no credential; a server without a presenter
// token keeps the one shared anonymous scope.
func (a *admission) anonymousByAddress(next echo.HandlerFunc) echo.HandlerFunc {
	if !a.locked {
		return next
	}
	return func(c echo.Context) error {
		r := c.Request()
		scope := anonymousPrefix + scopeID("address "+a.presenter.clientIP(r))
		c.SetRequest(r.WithContext(context.WithValue(r.Context(), anonymousScopeKey{}, scope)))
		return next(c)
	}
}

// scopeIDBytes is how much of a credential's SHA-256 a scope keeps: 128
// bits, so two callers never share a scope by accident. Pages show only
// the first few hex digits (views.ScopeLabel).
const scopeIDBytes = 16

// bearerScheme is the one authentication scheme a scope is read from.
const bearerScheme = "bearer"

// bearerToken parses an Authorization header value as a Bearer
// credential: the scheme, compared without regard to case (RFC 9110
// §11.1), then one or more spaces or tabs, then a token of visible ASCII
// characters and nothing after it. isBearer reports whether the scheme is
// Bearer at all; ok whether the whole credential is well formed.
func bearerToken(h string) (token string, isBearer, ok bool) {
	h = strings.Trim(h, " \t")
	i := strings.IndexAny(h, " \t")
	scheme, rest := h, ""
	if i >= 0 {
		scheme, rest = h[:i], strings.TrimLeft(h[i:], " \t")
	}
	if !strings.EqualFold(scheme, bearerScheme) {
		return "", false, false
	}
	if rest == "" {
		return "", true, false
	}
	for i := 0; i < len(rest); i++ {
		if rest[i] <= ' ' || rest[i] >= 0x7f {
			return "", true, false
		}
	}
	return rest, true, true
}

// authProblem says what is wrong with r's Authorization header, or nil
// when the caller's scope is clear. A header that is not a usable Bearer
// credential must never fall back to the shared anonymous scope, where
// another caller would replay this caller's answers: a malformed Bearer
// credential is refused, and so is another scheme (Basic, say) unless a
// session cookie names the caller (a browser behind a proxy that asks for
// a password sends both).
func authProblem(r *http.Request) error {
	values := r.Header.Values("Authorization")
	if len(values) == 0 {
		return nil
	}
	if len(values) > 1 {
		return pay.Errorf(pay.EUNAUTHORIZED, "Send one Authorization header, not %d.", len(values))
	}
	_, isBearer, ok := bearerToken(values[0])
	switch {
	case ok:
		return nil
	case isBearer:
		return pay.Errorf(pay.EUNAUTHORIZED, "The Authorization header must be \"Bearer <token>\": the scheme, a space, then a token of visible ASCII characters with no spaces.")
	case hasSession(r):
		return nil
	}
	return pay.Errorf(pay.EUNAUTHORIZED, "Only Bearer tokens name a caller here; send \"Authorization: Bearer <token>\" or no Authorization header at all (the shared anonymous scope).")
}

// requireClearScope refuses API requests whose Authorization header
// names no scope (see authProblem) with 401, before any handler or the
// lab's dispatcher reads the scope.
func requireClearScope(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		if !strings.HasPrefix(r.URL.Path, "/v1/") {
			return next(c)
		}
		if err := authProblem(r); err != nil {
			return err
		}
		return next(c)
	}
}

// callerScope returns the scope that keys and charges belong to: a
// bearer token (each token is its own demo account; there is no real
// authentication), else the browser session, else the shared anonymous
// scope (in a class, the scope of the caller's address). Credentials are
// stored hashed, so the page never shows one.
// Requests whose Authorization header is not a clear credential never get
// here (requireClearScope).
func callerScope(r *http.Request) string {
	if tok, _, ok := bearerToken(r.Header.Get("Authorization")); ok {
		return "token:" + scopeID(tok)
	}
	if c, err := r.Cookie(sessionCookie); err == nil && validSessionID(c.Value) {
		// Hashed like tokens: the scope is shown on the shared board, and
		// the cookie's value would let anyone watching act as this browser.
		return "session:" + scopeID(c.Value)
	}
	if scope, ok := r.Context().Value(anonymousScopeKey{}).(string); ok {
		return scope
	}
	return AnonymousScope
}

// scopeID is the stored form of a credential.
func scopeID(credential string) string {
	sum := sha256.Sum256([]byte(credential))
	return hex.EncodeToString(sum[:scopeIDBytes])
}

func hasSession(r *http.Request) bool {
	c, err := r.Cookie(sessionCookie)
	return err == nil && validSessionID(c.Value)
}

func validSessionID(v string) bool {
	_, err := uuid.Parse(v)
	return err == nil && len(v) == 36
}

// ensureSession gives a browser a session cookie if it has none, and
// returns its scope.
func ensureSession(w http.ResponseWriter, r *http.Request) string {
	if hasSession(r) {
		return callerScope(r)
	}
	id := uuid.NewString()
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: id, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteLaxMode, MaxAge: 30 * 24 * 3600})
	r.AddCookie(&http.Cookie{Name: sessionCookie, Value: id})
	return callerScope(r)
}

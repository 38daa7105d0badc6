package web

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"

	"github.com/google/uuid"
)

// sessionCookie holds a browser's demo account id.
const sessionCookie = "paytwice_session"

// AnonymousScope is shared by every API caller that sends neither a
// bearer token nor a session cookie.
const AnonymousScope = "anonymous"

// callerScope returns the scope that keys and charges belong to: a
// bearer token (each token is its own demo account; there is no real
// authentication), else the browser session, else the shared anonymous
// scope. Tokens are stored hashed, so the page never shows one.
func callerScope(r *http.Request) string {
	if auth := r.Header.Get("Authorization"); auth != "" {
		if tok, ok := strings.CutPrefix(auth, "Bearer "); ok && strings.TrimSpace(tok) != "" {
			sum := sha256.Sum256([]byte(strings.TrimSpace(tok)))
			return "token:" + hex.EncodeToString(sum[:6])
		}
	}
	if c, err := r.Cookie(sessionCookie); err == nil && validSessionID(c.Value) {
		// Hashed like tokens: the scope is shown on the shared board, and
		// the cookie's value would let anyone watching act as this browser.
		sum := sha256.Sum256([]byte(c.Value))
		return "session:" + hex.EncodeToString(sum[:6])
	}
	return AnonymousScope
}

func validSessionID(v string) bool {
	_, err := uuid.Parse(v)
	return err == nil && len(v) == 36
}

// ensureSession gives a browser a session cookie if it has none, and
// returns its scope.
func ensureSession(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(sessionCookie); err == nil && validSessionID(c.Value) {
		return callerScope(r)
	}
	id := uuid.NewString()
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: id, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteLaxMode, MaxAge: 30 * 24 * 3600})
	r.AddCookie(&http.Cookie{Name: sessionCookie, Value: id})
	return callerScope(r)
}

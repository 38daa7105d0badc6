package web

import (
	"encoding/hex"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
)

// TestWorkshopRunFollowsNoRedirect: a student's endpoint that answers
// every request with a redirect to another address, one the room may
// call, is never followed there: the run's requests all reach the
// registered endpoint, and the row says the checker could not test it.
// The room calls what the student registered and nothing a server's
// answer points at.
func TestWorkshopRunFollowsNoRedirect(t *testing.T) {
	waitsOnRealClocks(t) // the checker's run, on a server of its own
	env := newWorkshopEnv(t)

	var elsewhere atomic.Int64 // requests that reached the redirect's target
	target := listenOn(t, "127.0.0.3", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
		w.WriteHeader(http.StatusCreated)
	}))
	var asked atomic.Int64
	addr := listenOn(t, "127.0.0.2", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		http.Redirect(w, r, "http://"+target+"/v1/payments", http.StatusTemporaryRedirect)
	}))

	token := "red-" + hex.EncodeToString(randomBytes(8))
	registerStudent(t, env, token, "Red", "http://"+addr+"/v1/payments")
	row := runStudent(t, env, token)
	if row.State != "not run" || row.Message == "" {
		t.Errorf("the redirecting endpoint's row: %+v, want not run, with the reason", row)
	}
	if asked.Load() == 0 {
		t.Fatal("the run never reached the registered endpoint")
	}
	if n := elsewhere.Load(); n != 0 {
		t.Fatalf("the run followed the endpoint's redirect: %d request(s) reached %s", n, target)
	}
	t.Logf("%d request(s) to the endpoint, none followed; the row says: %s", asked.Load(), row.Message)
}

// listenOn serves h on a free port of ip until the test ends, and
// returns its address.
func listenOn(t *testing.T, ip string, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatalf("listening on %s (a loopback address of its own): %v", ip, err)
	}
	hs := &http.Server{Handler: h}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	return ln.Addr().String()
}

package web

import (
	"net/http"
	"strings"
	"testing"
)

// What a student puts on the projector through the API is short and
// plain on the presenter's board: a 64-byte order id of markup is shown
// as its first characters, escaped, and nowhere whole.
func TestTheBoardShowsAStudentsOrderIDShortAndEscaped(t *testing.T) {
	t.Parallel()
	const token = "front-of-the-room"
	env := newTestEnv(t, Config{PresenterToken: token})
	order := "<b>1</b>&" + strings.Repeat("W", 55)
	if len(order) != 64 {
		t.Fatalf("the order id is %d bytes", len(order))
	}
	if r := payFrom(t, fromAddress("127.0.0.2"), env.URL, "odd-1", order, "Bearer odd"); r.Status != http.StatusCreated {
		t.Fatalf("the student's payment: %d %s", r.Status, r.Body)
	}
	r := getFrom(t, fromAddress("127.0.0.1"), env.URL+"/board", PresenterHeader, token, "Accept", "text/html")
	if r.Status != http.StatusOK {
		t.Fatalf("the board: %d", r.Status)
	}
	page := string(r.Body)
	if shown := "&lt;b&gt;1&lt;/b&gt;&amp;" + strings.Repeat("W", 10) + "…"; !strings.Contains(page, shown) {
		t.Errorf("the board does not show the order id as %q", shown)
	}
	if strings.Contains(page, "<b>1</b>") || strings.Contains(page, strings.Repeat("W", 11)) {
		t.Error("the board shows the student's order id whole, or unescaped")
	}
}

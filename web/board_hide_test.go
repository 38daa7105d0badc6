package web

import (
	"net/http"
	"strings"
	"testing"
)

func TestBoardHideIsThePresentersOneClick(t *testing.T) {
	t.Parallel()
	const token = "front-of-the-room"
	env := newTestEnv(t, Config{PresenterToken: token})
	env.Server.live()
	student := fromAddress("127.0.0.2")
	if r := payFrom(t, student, env.URL, "hide-1", "<i>LOOK-AT-ME</i>", "Bearer mallory"); r.Status != http.StatusCreated {
		t.Fatalf("the student's payment: %d %s", r.Status, r.Body)
	}
	waitUntil(t, "the board to draw the payment", func() bool { return len(env.Server.live().Snapshot().Timeline) == 1 })
	row := env.Server.live().Snapshot().Timeline[0].ID
	body := `{"row":"` + row + `","student":true}`

	if r := sendFrom(t, student, http.MethodPost, env.URL+"/api/board/hide", body); r.Status != http.StatusForbidden {
		t.Fatalf("a student hiding a row: %d %s", r.Status, r.Body)
	}
	page := getFrom(t, http.DefaultClient, env.URL+"/board?token="+token, "Accept", "text/html")
	if !strings.Contains(string(page.Body), `data-hide-row="`+row+`"`) || strings.Contains(string(page.Body), "<i>LOOK") {
		t.Fatalf("the board does not offer to hide the row, or shows the student's markup unescaped")
	}
	r := sendFrom(t, http.DefaultClient, http.MethodPost, env.URL+"/api/board/hide", body, PresenterHeader, token)
	if r.Status != http.StatusOK || !strings.Contains(string(r.Body), `"hidden":1`) {
		t.Fatalf("the presenter hiding the student: %d %s", r.Status, r.Body)
	}
	if n := len(env.Server.live().Snapshot().Timeline); n != 0 {
		t.Fatalf("%d rows still shown", n)
	}
	if r := sendFrom(t, http.DefaultClient, http.MethodPost, env.URL+"/api/board/hide", body, PresenterHeader, token); r.Status != http.StatusNotFound {
		t.Fatalf("hiding a row no longer shown: %d %s", r.Status, r.Body)
	}
	if r := sendFrom(t, http.DefaultClient, http.MethodPost, env.URL+"/api/board/hide", `{}`, PresenterHeader, token); r.Status != http.StatusBadRequest {
		t.Fatalf("hiding nothing: %d %s", r.Status, r.Body)
	}
}

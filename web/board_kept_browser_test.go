package web

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

// TestBoardOpenedAfterAPIPaymentsDrawsThem: a server takes payments
// through the API before any page is open; its board starts only when the
// first page asks for it. The counters, the tables and the timeline's
// export have those payments, and so does the board's timeline: every
// request in its row, newest first, each once, and the next payment is
// drawn above them as usual.
func TestBoardOpenedAfterAPIPaymentsDrawsThem(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	env := newTestEnv(t, Config{})
	orders := []string{"A-7101", "A-7102", "A-7103"}
	for i, o := range orders {
		if r := env.pay(fmt.Sprintf("kept-%d", i), fmt.Sprintf(`{"order_id":%q,"amount_satang":100}`, o)); r.Status != http.StatusCreated {
			t.Fatalf("paying %s: %d %s", o, r.Status, r.Body)
		}
	}
	if env.Server.pages.board.started.Load() {
		t.Fatal("the board started before any page asked for it: this test needs a server that only served the API")
	}

	// The board's page, as the server renders it.
	r := env.get("/board")
	if r.Status != http.StatusOK {
		t.Fatalf("GET /board: %d", r.Status)
	}
	page := string(r.Body)
	timeline := page[strings.Index(page, `id="timeline"`):]
	timeline = timeline[:strings.Index(timeline, "</ol></li></ol>")+len("</ol></li></ol>")]
	rows := regexp.MustCompile(`<li id="(tl-[^"]+)"`).FindAllStringSubmatch(timeline, -1)
	if len(rows) != len(orders) {
		t.Fatalf("the board's timeline has %d rows, want %d (one per payment): %s", len(rows), len(orders), timeline)
	}
	for i, o := range orders {
		row := timeline[strings.Index(timeline, rows[len(rows)-1-i][0]):]
		if next := strings.Index(row[1:], `<li id="tl-`); next > 0 {
			row = row[:next+1]
		}
		if !strings.Contains(row, o) || !strings.Contains(row, "201 paid") {
			t.Errorf("row %d from the bottom is not %s paid: %s", i+1, o, row)
		}
	}

	// The board in a browser: the same rows, then the next payment on top.
	ctx := liveBrowser(t, 1366, 900)
	liveOpen(t, ctx, env.URL+"/board")
	const rowsJS = `[...document.querySelectorAll("#timeline > li")].map(li => li.querySelector(".order")?.textContent || "")`
	got := liveEval[[]string](t, ctx, rowsJS)
	if want := []string{"A-7103", "A-7102", "A-7101"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("the board in a browser shows the orders %q, want %q", got, want)
	}
	if r := env.pay("kept-next", `{"order_id":"A-7104","amount_satang":100}`); r.Status != http.StatusCreated {
		t.Fatalf("paying A-7104: %d %s", r.Status, r.Body)
	}
	liveWait(t, ctx, "the next payment on top", waitUntilBound,
		`(() => { const o = `+rowsJS+`; return o.join(",") === "A-7104,A-7103,A-7102,A-7101"; })()`)
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/jackc/pgx/v5"

	"paytwice/store/postgres/pgtest"
	"paytwice/web"
)

// TestBrowserClassMovesFromSQLiteToCluster is chapter 8's move: a class
// runs on paytwice with its SQLite file, the teacher stops it and starts
// "paytwice cluster" (PostgreSQL) on the same address with the same
// presenter token. The board and three phones (390x844) stay open. Within
// ten seconds every phone is live on the cluster and says the server
// restarted; the board, still signed in, starts the lessons, and chapter 8,
// whose chapter
// and lab mode reach every phone within ten seconds; step mode, turned on
// from the board, holds a phone's payment on the cluster until the
// presenter plays it; and no card states a count the cluster's books do
// not have.
func TestBrowserClassMovesFromSQLiteToCluster(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	bin := binary(t)
	first := startServer(ctx, t, bin, filepath.Join(t.TempDir(), "class.db"), "-presenter-token", clusterPresenterToken)
	u, err := url.Parse(first.url)
	if err != nil {
		t.Fatal(err)
	}
	addr := u.Host
	presenter := func(p *process, method, path, body string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, p.url+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(web.PresenterHeader, clusterPresenterToken)
		res, err := p.client.Do(req)
		if err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("%s %s as the presenter: %v %v", method, path, res, err)
		}
		res.Body.Close()
	}
	presenter(first, http.MethodPut, "/api/lessons/current", `{"slug":"check-then-insert"}`)

	browser := clusterBrowser(ctx, t)
	board, cancelBoard := chromedp.NewContext(browser, chromedp.WithNewBrowserContext())
	defer cancelBoard()
	browse(t, board, "the board", chromedp.EmulateViewport(1280, 720), chromedp.Navigate(first.url+"/board?token="+clusterPresenterToken))
	waitFor(t, board, "the board live, for the presenter", `document.getElementById("stream-state").textContent === "live" && document.querySelector(".board").dataset.presenter === "true"`)
	var phones []context.Context
	for range 3 {
		phone, cancelPhone := openPhone(t, browser, first.url+"/", "the phone live in chapter 7", `document.getElementById("lesson").dataset.slug === "check-then-insert"`)
		defer cancelPhone()
		phones = append(phones, phone)
	}
	browse(t, phones[0], "paying on SQLite", chromedp.Click(chromedp.CSS("#pay")))
	waitFor(t, phones[0], "the payment on SQLite", `document.getElementById("pay-status").dataset.state === "paid"`)

	first.stop(t)
	c := &cluster{process: startProcess(ctx, t, bin, "cluster", "-addr", addr, "-db", dbURL, "-presenter-token", clusterPresenterToken, "-servers", "2")}
	if c.url != first.url {
		t.Fatalf("the cluster serves %s, not the address the class had, %s", c.url, first.url)
	}
	moved := time.Now()
	for i, phone := range phones {
		waitFor(t, phone, fmt.Sprintf("phone %d live on the cluster", i+1), `(() => { const n = document.getElementById("stream-note");
			return document.getElementById("stream-state").textContent === "live" && !n.hidden && n.textContent.includes("restarted"); })()`)
	}
	t.Logf("every phone live on the cluster %s after it started", time.Since(moved).Round(time.Millisecond))
	// The paid order is not in the cluster's books: the card says the
	// class moved, not that a reset closed it.
	waitFor(t, phones[0], "the paid phone's card after the move", `document.getElementById("pay-status").textContent.includes("another server's books")`)
	for i, phone := range phones {
		says, err := chromedp.Run(phone, chromedp.Evaluate[string](`document.getElementById("pay-status").textContent`))
		if err != nil || strings.Contains(says, "reset") {
			t.Errorf("phone %d after the move: %q %v", i+1, says, err)
		}
	}
	checkCards(t, phones)

	// The presenter, still signed in, starts the lessons from the board
	// (the cluster's room is its database's, a new one), then goes to
	// chapter 8.
	waitFor(t, board, "the board live on the cluster", `document.getElementById("stream-state").textContent === "live" && !!document.getElementById("lesson-start")`)
	browse(t, board, "Start the lessons on the board", chromedp.Click(chromedp.CSS("#lesson-start")))
	if !hasLesson(ctx, t, c, "connection-never-happens") {
		status, _ := chromedp.Run(board, chromedp.Evaluate[string](`document.getElementById("lesson-status").textContent`))
		t.Fatalf("the board's Start the lessons did not start chapter 1 on the cluster: %q", status)
	}
	presenter(c.process, http.MethodPut, "/api/lessons/current", `{"slug":"lock-in-memory"}`)
	chose := time.Now()
	for i, phone := range phones {
		waitFor(t, phone, fmt.Sprintf("phone %d in chapter 8 with its lab mode", i+1), `
			document.getElementById("lesson").dataset.slug === "lock-in-memory" &&
			document.querySelector('[data-lab-mode="memory_lock"]').checked`)
	}
	t.Logf("every phone in chapter 8 %s after the presenter chose it", time.Since(chose).Round(time.Millisecond))
	checkCards(t, phones)

	// Step mode from the board holds a phone's payment on the cluster.
	browse(t, board, "step mode on from the board", chromedp.Click(chromedp.CSS(`#step-bar [data-step="on"]`)))
	waitFor(t, board, "step mode on", `document.getElementById("step-bar").classList.contains("step-on")`)
	browse(t, phones[1], "paying in step mode", chromedp.Click(chromedp.CSS("#pay")))
	waitFor(t, board, "the payment held", `!document.querySelector('#step-bar [data-step="play"]').disabled`)
	if n := clusterCharges(ctx, t, dbURL); n != 0 {
		t.Fatalf("%d charges on the cluster while the presenter stepped nothing", n)
	}
	browse(t, board, "Play on the board", chromedp.Click(chromedp.CSS(`#step-bar [data-step="play"]`)))
	waitFor(t, phones[1], "the stepped payment", `document.getElementById("pay-status").dataset.state === "paid"`)
	if n := clusterCharges(ctx, t, dbURL); n != 1 {
		t.Fatalf("%d charges on the cluster, want the one the presenter stepped", n)
	}
	checkCards(t, phones)
}

// hasLesson reports whether the room runs the chapter slug.
func hasLesson(ctx context.Context, t *testing.T, c *cluster, slug string) bool {
	t.Helper()
	// A minute, not seconds: the board's click reaches the cluster in
	// milliseconds on an idle machine, seconds on a loaded one.
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		r := c.do(ctx, http.MethodGet, "/api/lessons", "", "")
		var st struct {
			Current string `json:"current"`
		}
		if r.err == nil && json.Unmarshal(r.body, &st) == nil && st.Current == slug {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

// clusterCharges counts the charges in the cluster's books, the lab's
// included.
func clusterCharges(ctx context.Context, t *testing.T, dbURL string) int {
	t.Helper()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	// The lab's unguarded modes (chapter 8's lock in memory) keep their
	// charges in a table of their own.
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM charges) + (SELECT count(*) FROM lab_loose_charges)`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// checkCards checks that every card that states a count of charges
// states the count the server's look-up gives its own session, and that
// no card tells of a reset.
func checkCards(t *testing.T, phones []context.Context) {
	t.Helper()
	for i, phone := range phones {
		got, err := chromedp.Run(phone, chromedp.Evaluate[string](`(async () => {
			const s = document.getElementById("pay-status"), n = s.getAttribute("data-charges");
			if (n === null) { return "ok"; }
			const order = document.getElementById("order-id").textContent;
			const res = await fetch("/v1/payments?order_id=" + encodeURIComponent(order), { credentials: "same-origin", cache: "no-store" });
			const have = ((await res.json()).charges || []).length;
			return String(have) === n ? "ok" : "the card says " + n + " charges for " + order + ", the server has " + have + ": " + s.textContent;
		})()`, chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatalf("phone %d: %v", i+1, err)
		}
		if got != "ok" {
			t.Errorf("phone %d: %s", i+1, got)
		}
	}
}

package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"

	"paytwice/pay"
	"paytwice/store"
	"paytwice/store/postgres/pgtest"
	"paytwice/web"
)

// TestBrowserSIGTERMWithPagesOpen stops the built binary with SIGTERM in
// the middle of a class: the board and two phones (390x844) are open,
// the class is in a chapter with step mode on, and one phone's payment is
// held by step mode before the gateway. The process exits with status 0
// within its grace; the held payment's card says what the books say
// (nothing was charged: no charge, no key), never that it was paid; a
// second payment, stepped past the gateway's answer, ends as the books
// have it (its charge saved and the card paid, or its key started and the
// card's outcome unknown), never "nothing was charged"; every
// page's event stream ends, and the pages say they lost the server rather
// than stay "live". Started again on the same file and address, the
// server has the class where it was: every page is live again in the
// chapter, step mode still on, and the books still hold no charge.
func TestBrowserSIGTERMWithPagesOpen(t *testing.T) {
	waitsSideBySide(t)
	const token = "sigterm-presenter-token"
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := binary(t)
	dbPath := filepath.Join(t.TempDir(), "class.db")
	first := startServer(ctx, t, bin, dbPath, "-presenter-token", token)
	u, err := url.Parse(first.url)
	if err != nil {
		t.Fatal(err)
	}
	presenter := func(p *process, method, path, body string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, p.url+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(web.PresenterHeader, token)
		res, err := p.client.Do(req)
		if err != nil {
			t.Fatalf("%s %s as the presenter: %v", method, path, err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("%s %s as the presenter: %d", method, path, res.StatusCode)
		}
	}
	const chapter = "personal-data-key" // the protocol as it should be; only the key is the e-mail
	presenter(first, http.MethodPut, "/api/lessons/current", `{"slug":"`+chapter+`"}`)
	presenter(first, http.MethodPut, "/api/step", `{"on":true}`)

	browser := clusterBrowser(ctx, t)
	board, cancelBoard := chromedp.NewContext(browser, chromedp.WithNewBrowserContext())
	defer cancelBoard()
	browse(t, board, "the board", chromedp.EmulateViewport(1280, 720), chromedp.Navigate(first.url+"/board?token="+token))
	waitFor(t, board, "the board live", `document.getElementById("stream-state").textContent === "live"`)
	var phones []context.Context
	for range 2 {
		phone, cancelPhone := openPhone(t, browser, first.url+"/", "the phone live in the chapter", `document.getElementById("lesson").dataset.slug === "`+chapter+`"`)
		defer cancelPhone()
		phones = append(phones, phone)
	}
	orderID := evalString(t, phones[0], `document.getElementById("order-id").textContent`)

	// held lists what step mode holds, waiting until it holds n (for as
	// long as ctx lasts: a page's payment reaches its checkpoint in
	// milliseconds on an idle machine, seconds on a loaded one).
	held := func(n int) []heldRequest {
		t.Helper()
		for ctx.Err() == nil {
			r := first.do(ctx, http.MethodGet, "/api/step", "", "")
			var st struct {
				Held []heldRequest `json:"held"`
			}
			if r.err == nil && json.Unmarshal(r.body, &st) == nil && len(st.Held) == n {
				return st.Held
			}
			time.Sleep(25 * time.Millisecond)
		}
		t.Fatalf("step mode never held %d payments", n)
		return nil
	}
	// The first phone pays; step mode holds it at its first checkpoint.
	browse(t, phones[0], "paying", chromedp.Click(chromedp.CSS("#pay")))
	first0 := held(1)[0]
	// The second phone pays, and the presenter steps its payment past the
	// gateway's answer: the gateway has charged it, nothing is saved yet.
	browse(t, phones[1], "paying", chromedp.Click(chromedp.CSS("#pay")))
	var second heldRequest
	for _, h := range held(2) {
		if h.Request != first0.Request {
			second = h
		}
	}
	for i := 0; second.Checkpoint != "gateway answered"; i++ {
		if i == 8 {
			t.Fatalf("the second payment never reached the gateway's answer: held at %q", second.Checkpoint)
		}
		presenter(first, http.MethodPost, "/api/step/next", `{"request":"`+second.Request+`"}`)
		for ctx.Err() == nil {
			if h := held(2); h[0].Request == second.Request && h[0].Checkpoint != second.Checkpoint {
				second = h[0]
				break
			} else if h[1].Request == second.Request && h[1].Checkpoint != second.Checkpoint {
				second = h[1]
				break
			}
			time.Sleep(25 * time.Millisecond)
		}
	}
	waitFor(t, board, "the held requests on the board", `document.getElementById("step-bar").textContent.includes("gateway answered")`)

	t.Logf("SIGTERM with the board, two phones and a held payment: exited %s later", sigterm(t, first, 20*time.Second))

	// The books: nothing charged, no key left started.
	started, done, charges := sqliteBooks(ctx, t, dbPath)
	if started+done > 1 || charges > 1 {
		t.Fatalf("after SIGTERM: %d keys started, %d done, %d charges, want the first payment's none and at most the second's", started, done, charges)
	}
	t.Logf("after SIGTERM the books hold %d started keys, %d done, %d charges", started, done, charges)
	// The card says so, and does not claim a charge.
	waitFor(t, phones[0], "the held payment's card", `(() => { const st = document.getElementById("pay-status");
		return st.textContent.includes("nothing was charged") && st.dataset.state !== "paid"; })()`)
	t.Logf("the held payment's card: %s", evalString(t, phones[0], `document.getElementById("pay-status").textContent`))
	// The payment past the gateway: its card says what the books hold, a
	// charge or an outcome not known yet, never that nothing was charged.
	secondCard := `document.getElementById("pay-status").textContent.includes("outcome unknown")`
	if started == 0 && charges == 1 {
		secondCard = `document.getElementById("pay-status").dataset.state === "paid"`
	}
	waitFor(t, phones[1], "the second payment's card as the books say", secondCard)
	if card := evalString(t, phones[1], `document.getElementById("pay-status").textContent`); strings.Contains(card, "nothing was charged") {
		t.Errorf("the second payment's card says nothing was charged after the gateway charged it: %s", card)
	}
	t.Logf("the second payment's card: %s", evalString(t, phones[1], `document.getElementById("pay-status").textContent`))
	// Every stream ended: no page still says it is live.
	for _, p := range append([]context.Context{board}, phones...) {
		waitFor(t, p, "the page no longer live", `document.getElementById("stream-state").textContent !== "live"`)
	}

	// Started again on the same file and address: the class is where it was.
	again := startServer(ctx, t, bin, dbPath, "-presenter-token", token, "-addr", u.Host)
	defer again.stop(t)
	for i, p := range phones {
		waitFor(t, p, "the phone back in the chapter", `(() => { const n = document.getElementById("stream-note");
			return document.getElementById("stream-state").textContent === "live" && document.getElementById("lesson").dataset.slug === "`+chapter+`" &&
				!n.hidden && n.textContent.includes("restarted") && n.textContent.includes("Step mode is on"); })()`)
		// As the books say: the first payment charged nothing; the second
		// is paid when its charge was saved.
		st := evalString(t, p, `document.getElementById("pay-status").dataset.state || ""`)
		if paid := i == 1 && started == 0 && charges == 1; (st == "paid") != paid {
			t.Errorf("phone %d's card is %q after the restart; the books hold %d charges, %d keys started", i+1, st, charges, started)
		}
	}
	if got := evalString(t, phones[0], `document.getElementById("order-id").textContent`); got != orderID {
		t.Errorf("the first phone's order is %q after the restart, want %q: nothing closed it", got, orderID)
	}
	waitFor(t, board, "the board live again", `document.getElementById("stream-state").textContent === "live"`)
	r := again.do(ctx, http.MethodGet, "/api/step", "", "")
	if r.err != nil || !strings.Contains(string(r.body), `"on":true`) {
		t.Fatalf("step mode after the restart: %v %s", r.err, r.body)
	}
}

// heldRequest is one payment step mode holds, as GET /api/step lists it.
type heldRequest struct {
	Request    string `json:"request"`
	Checkpoint string `json:"checkpoint"`
}

// evalString evaluates expr in the page.
func evalString(t *testing.T, ctx context.Context, expr string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return s
}

// openPhone opens url in a phone-sized page (390x844) of browser and
// waits until its event stream is live and cond, a condition of the page
// ("" for none), holds.
func openPhone(t *testing.T, browser context.Context, url, what, cond string) (context.Context, context.CancelFunc) {
	t.Helper()
	phone, cancel := chromedp.NewContext(browser, chromedp.WithNewBrowserContext())
	browse(t, phone, "a phone", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile, chromedp.EmulateScale(2)), chromedp.Navigate(url))
	live := `document.getElementById("stream-state").textContent === "live"`
	if cond != "" {
		live += " && " + cond
	}
	waitFor(t, phone, what, live)
	return phone, cancel
}

// sigterm sends SIGTERM to p and waits for it to exit, with status 0,
// within grace (its work's and its answers' graces, and a margin); it
// returns how long the exit took.
func sigterm(t *testing.T, p *process, grace time.Duration) time.Duration {
	t.Helper()
	sent := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
	case <-time.After(grace):
		t.Fatalf("the server did not exit within its grace after SIGTERM: %s", p.stderr.String())
	}
	took := time.Since(sent).Round(time.Millisecond)
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("exit code %d: %s", code, p.stderr.String())
	}
	return took
}

// sqliteBooks counts the keys started and done and the charges in the
// payments file at dbPath, opened anew for each count.
func sqliteBooks(ctx context.Context, t *testing.T, dbPath string) (started, done, charges int) {
	t.Helper()
	db, err := store.Open(dbPath, store.Options{Schema: pay.SchemaPayments})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if started, done, err = db.KeyCounts(ctx); err != nil {
		t.Fatal(err)
	}
	if charges, err = db.CountCharges(ctx); err != nil {
		t.Fatal(err)
	}
	return started, done, charges
}

// waitClaimed waits until the books hold the payment's key started, for
// up to two minutes: a page's click takes milliseconds to claim its key on
// an idle machine, seconds on a loaded one under -race.
func waitClaimed(t *testing.T, started func() int) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); {
		if started() == 1 {
			return
		}
		time.Sleep(25 * time.Millisecond)
	}
	t.Fatal("the payment was never claimed")
}

// lookUpPhonesOrder asks the server from the phone, as its card tells a student
// to, what became of the phone's order: its state and how many charges it
// has ("paid 1").
func lookUpPhonesOrder(t *testing.T, phone context.Context) (orderID, lookup string) {
	t.Helper()
	orderID = evalString(t, phone, `document.getElementById("order-id").textContent`)
	lookup, err := chromedp.Run(phone, chromedp.Evaluate[string](`fetch("/v1/payments?order_id=" + encodeURIComponent(`+strconv.Quote(orderID)+`),
		{credentials: "same-origin", headers: {"Accept": "application/json"}}).then(r => r.json()).then(b => b.state + " " + b.charges.length)`,
		chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("looking the order up from the phone: %v", err)
	}
	return orderID, lookup
}

// TestBrowserSIGTERMWithAPaymentAtAHungGateway stops the built binary with
// SIGTERM while a phone's payment waits on the gateway, which does not
// answer (its database, the gateway's ledger in PostgreSQL, is locked by
// the test). The process exits with status 0 once its grace is over; the
// phone's card says the gateway did not answer and that whether the order
// is paid is unknown (its look-up found no server to ask), never that the
// order was paid or that nothing was charged, and the books agree: the
// key is left started, no charge. Started again on the same
// files with the gateway answering, its start-up sweep asks the gateway,
// which never charged, and releases the key: the page, back by itself,
// checks its order and says it is not paid.
func TestBrowserSIGTERMWithAPaymentAtAHungGateway(t *testing.T) {
	waitsSideBySide(t)
	const token = "hung-gateway-presenter-token"
	gatewayURL := pgtest.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := binary(t)
	dbPath := filepath.Join(t.TempDir(), "class.db")
	first := startServer(ctx, t, bin, dbPath, "-gateway-db", gatewayURL, "-presenter-token", token)
	u, err := url.Parse(first.url)
	if err != nil {
		t.Fatal(err)
	}
	browser := clusterBrowser(ctx, t)
	phone, cancelPhone := openPhone(t, browser, first.url+"/", "the phone live", "")
	defer cancelPhone()

	// The gateway hangs: its ledger's table is locked until the test lets go.
	conn, err := pgx.Connect(ctx, gatewayURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE gateway.charges IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	browse(t, phone, "paying", chromedp.Click(chromedp.CSS("#pay")))
	keyCounts := func() (started, done, charges int) {
		t.Helper()
		return sqliteBooks(ctx, t, dbPath)
	}
	waitClaimed(t, func() int { started, _, _ := keyCounts(); return started })

	t.Logf("SIGTERM with a payment at a hung gateway: exited %s later", sigterm(t, first, 25*time.Second))
	if started, done, charges := keyCounts(); started != 1 || done != 0 || charges != 0 {
		t.Fatalf("after SIGTERM: %d keys started, %d done, %d charges; want the key left started and no charge", started, done, charges)
	}
	waitFor(t, phone, "the card: outcome unknown", `(() => { const st = document.getElementById("pay-status");
		return st.dataset.state === "unknown" && /whether (the|this) order is paid is unknown/.test(st.textContent) && !st.textContent.includes("nothing was charged"); })()`)
	t.Logf("the card: %s", evalString(t, phone, `document.getElementById("pay-status").textContent`))

	// The gateway answers again; the server starts again on the same files.
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	again := startServer(ctx, t, bin, dbPath, "-gateway-db", gatewayURL, "-presenter-token", token, "-addr", u.Host)
	defer again.stop(t)
	<-again.startupDone
	if started, done, charges := keyCounts(); started != 0 || done != 0 || charges != 0 {
		t.Fatalf("after the start-up sweep: %d keys started, %d done, %d charges; want the key released: the gateway never charged", started, done, charges)
	}
	// The page comes back by itself and checks its order with the server.
	waitFor(t, phone, "the card: not paid, as the books say", `(() => { const st = document.getElementById("pay-status");
		return st.dataset.state !== "paid" && /no charge|not paid/.test(st.textContent); })()`)
	t.Logf("the card after the restart: %s", evalString(t, phone, `document.getElementById("pay-status").textContent`))
}

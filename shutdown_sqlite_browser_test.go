package main

import (
	"context"
	"database/sql"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"paytwice/pay"
	"paytwice/store"
)

// TestBrowserSIGTERMWithAPaymentAtAHungGatewayOnSQLite is the embedded
// default with nothing else: the payments and the gateway's ledger are
// SQLite files of the built binary. A phone's payment waits on the
// gateway, whose ledger file another connection holds locked for writing
// (a gateway slower than the shutdown's grace, which the latency switch
// cannot make: its cap is the grace), when SIGTERM arrives. The process
// exits with status 0 within its graces; the phone's card says that
// whether the order is paid is unknown (in the server's words, or in the
// page's own when its attempt gave up first), never that it was paid or
// that nothing was charged, and the books agree: the key is left started, no
// charge, none at the gateway. Started again on the same files with the
// ledger free, the start-up sweep asks the gateway, which never charged,
// and releases the key: the order's look-up from the phone says it was
// not charged, as the books do, and paying again charges it once.
func TestBrowserSIGTERMWithAPaymentAtAHungGatewayOnSQLite(t *testing.T) {
	sigtermAtAHungGatewayOnSQLite(t, false)
}

// TestBrowserSIGTERMWithAGatewayThatChargesAfterTheGraceOnSQLite is the
// risky one of the two: the hung gateway was charging all along, and its
// charge lands after the process has given up on it and exited. The
// process still exits with status 0 within its graces and the card says
// the outcome is unknown; the books hold the key started and no charge,
// while the gateway's own books hold one. Started again, the start-up
// sweep asks the gateway, finds the charge and records it: the order's
// look-up from the phone says it was paid, once, and paying again with the
// same key replays the saved answer: one charge in the books and one at
// the gateway, never two.
func TestBrowserSIGTERMWithAGatewayThatChargesAfterTheGraceOnSQLite(t *testing.T) {
	sigtermAtAHungGatewayOnSQLite(t, true)
}

// sigtermAtAHungGatewayOnSQLite runs the two tests above: chargesLate says
// whether the hung gateway's charge lands after the process has exited.
func sigtermAtAHungGatewayOnSQLite(t *testing.T, chargesLate bool) {
	waitsSideBySide(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := binary(t)
	dir := t.TempDir()
	dbPath, gatewayPath := filepath.Join(dir, "class.db"), filepath.Join(dir, "gateway.db")
	first := startServer(ctx, t, bin, dbPath, "-gateway-db", gatewayPath)
	u, err := url.Parse(first.url)
	if err != nil {
		t.Fatal(err)
	}
	browser := clusterBrowser(ctx, t)
	phone, cancelPhone := openPhone(t, browser, first.url+"/", "the phone live", "")
	defer cancelPhone()

	// The gateway hangs: its ledger file is locked for writing until the
	// test lets go (BEGIN IMMEDIATE takes SQLite's one write lock).
	ledger, err := sql.Open("sqlite", "file:"+gatewayPath+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer ledger.Close()
	lock, err := ledger.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if _, err := lock.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		t.Fatal(err)
	}
	locked := true
	defer func() {
		if locked {
			lock.ExecContext(context.Background(), `ROLLBACK`)
		}
	}()
	browse(t, phone, "paying", chromedp.Click(chromedp.CSS("#pay")))
	books := func() (started, done, charges, gateway int) {
		t.Helper()
		started, done, charges = sqliteBooks(ctx, t, dbPath)
		if !locked { // the gateway's own books, once they can be read
			gw, err := store.Open(gatewayPath, store.Options{Schema: pay.SchemaLedger})
			if err != nil {
				t.Fatal(err)
			}
			defer gw.Close()
			if gateway, err = gw.CountGatewayCharges(ctx); err != nil {
				t.Fatal(err)
			}
		}
		return started, done, charges, gateway
	}
	waitClaimed(t, func() int { started, _, _, _ := books(); return started })
	if chargesLate {
		// The gateway is in the middle of charging: its record for the
		// key the process passed on (the claim's charge key, or the key
		// itself) is written in the transaction that holds its ledger,
		// and commits only once the process is gone. The simulated
		// gateway runs inside the process, so its own write dies with it;
		// the test writes the record a real gateway, another company's
		// system that outlives the process, would have committed.
		db, err := sql.Open("sqlite", "file:"+dbPath+"?mode=ro&_pragma=busy_timeout(10000)")
		if err != nil {
			t.Fatal(err)
		}
		var scope, key, orderID string
		var amount int64
		err = db.QueryRowContext(ctx, `SELECT scope, CASE WHEN charge_key <> '' THEN charge_key ELSE key END, order_id, amount_satang
			FROM idempotency_keys WHERE status = 'started'`).Scan(&scope, &key, &orderID, &amount)
		db.Close()
		if err != nil {
			t.Fatalf("reading the started key: %v", err)
		}
		if _, err := lock.ExecContext(ctx, `INSERT INTO gateway_charges (key, id, order_id, amount_satang, created_at) VALUES (?, ?, ?, ?, ?)`,
			pay.GatewayKey(scope, key), pay.NewID("gw_"), orderID, amount, time.Now().UnixMilli()); err != nil {
			t.Fatal(err)
		}
	}

	t.Logf("SIGTERM with a payment at a hung gateway on SQLite: exited %s later", sigterm(t, first, 25*time.Second))
	// The page gives up on an attempt after 10 s, the grace's length, so
	// its own words may come before the server's: either says the outcome
	// is unknown.
	waitFor(t, phone, "the card: outcome unknown", `(() => { const st = document.getElementById("pay-status");
		return st.dataset.state === "unknown" && /whether (the|this) order is paid is unknown|may or may not have charged/.test(st.textContent) &&
			!/nothing was charged|not paid|paid\b/.test(st.textContent.replace("whether the order is paid", "").replace("whether this order is paid", "")); })()`)
	t.Logf("the card: %s", evalString(t, phone, `document.getElementById("pay-status").textContent`))

	// The gateway answers again: with nothing in its books, or with the
	// charge that landed after the process had gone.
	end, atGateway := `ROLLBACK`, 0
	if chargesLate {
		end, atGateway = `COMMIT`, 1
	}
	if _, err := lock.ExecContext(ctx, end); err != nil {
		t.Fatal(err)
	}
	locked = false
	if started, done, charges, gateway := books(); started != 1 || done != 0 || charges != 0 || gateway != atGateway {
		t.Fatalf("after SIGTERM: %d keys started, %d done, %d charges, %d at the gateway; want the key left started, no charge in the books and %d at the gateway", started, done, charges, gateway, atGateway)
	}
	again := startServer(ctx, t, bin, dbPath, "-gateway-db", gatewayPath, "-addr", u.Host)
	defer again.stop(t)
	<-again.startupDone
	if chargesLate {
		afterTheLateCharge(ctx, t, phone, books)
		return
	}
	if started, done, charges, gateway := books(); started != 0 || done != 0 || charges != 0 || gateway != 0 {
		t.Fatalf("after the start-up sweep: %d keys started, %d done, %d charges, %d at the gateway; want the key released: the gateway never charged", started, done, charges, gateway)
	}
	// Looked up from the phone, as its card tells a student to: the order
	// was not charged, as the books say; the card never claims it paid.
	orderID, lookup := lookUpPhonesOrder(t, phone)
	if lookup != "not_charged 0" {
		t.Fatalf("the look-up of order %s after the restart: %q, want not_charged with no charge", orderID, lookup)
	}
	if st := evalString(t, phone, `document.getElementById("pay-status").dataset.state || ""`); st == "paid" || st == "twice" {
		t.Fatalf("the card says %q after the restart; the books hold no charge", st)
	}
	t.Logf("the look-up after the restart: %s; the card: %s", lookup, evalString(t, phone, `document.getElementById("pay-status").textContent`))
	// Paying again, as the card says is safe: one charge, at the gateway
	// as in the books.
	browse(t, phone, "paying again", chromedp.Click(chromedp.CSS("#pay")))
	waitFor(t, phone, "the card: paid", `document.getElementById("pay-status").dataset.state === "paid"`)
	if started, done, charges, gateway := books(); started != 0 || done != 1 || charges != 1 || gateway != 1 {
		t.Fatalf("after paying again: %d keys started, %d done, %d charges, %d at the gateway; want one of each", started, done, charges, gateway)
	}
}

// afterTheLateCharge checks the restarted server's books and answers once
// its start-up sweep has met the charge that landed at the gateway after
// the process had exited.
func afterTheLateCharge(ctx context.Context, t *testing.T, phone context.Context, books func() (started, done, charges, gateway int)) {
	t.Helper()
	if started, done, charges, gateway := books(); started != 0 || done != 1 || charges != 1 || gateway != 1 {
		t.Fatalf("after the start-up sweep: %d keys started, %d done, %d charges, %d at the gateway; want the gateway's charge found and recorded: the key done, one charge in the books and one at the gateway", started, done, charges, gateway)
	}
	// Looked up from the phone: the order was charged once, as the books
	// and the gateway say.
	orderID, lookup := lookUpPhonesOrder(t, phone)
	if lookup != "paid 1" {
		t.Fatalf("the look-up of order %s after the restart: %q, want paid with one charge", orderID, lookup)
	}
	if st := evalString(t, phone, `document.getElementById("pay-status").dataset.state || ""`); st == "twice" {
		t.Fatalf("the card says %q after the restart; the books hold one charge", st)
	}
	t.Logf("the look-up after the restart: %s; the card: %s", lookup, evalString(t, phone, `document.getElementById("pay-status").textContent`))
	// Paying again with the same key: the server replays the answer the
	// sweep saved, and nothing is charged again.
	key := evalString(t, phone, `document.getElementById("key-full").textContent`)
	browse(t, phone, "paying again", chromedp.Click(chromedp.CSS("#pay")))
	waitFor(t, phone, "the card: paid, replayed", `(() => { const st = document.getElementById("pay-status");
		return st.dataset.state === "paid" && st.textContent.includes("Idempotent-Replayed: true"); })()`)
	if again := evalString(t, phone, `document.getElementById("key-full").textContent`); again != key {
		t.Fatalf("the page paid again under key %q, not the order's key %q", again, key)
	}
	if started, done, charges, gateway := books(); started != 0 || done != 1 || charges != 1 || gateway != 1 {
		t.Fatalf("after paying again: %d keys started, %d done, %d charges, %d at the gateway; want the one charge, replayed", started, done, charges, gateway)
	}
	t.Logf("paying again: %s", evalString(t, phone, `document.getElementById("pay-status").textContent`))
}

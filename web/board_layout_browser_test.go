package web

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"paytwice/pay"
	"paytwice/sim"
	"paytwice/views"
	"paytwice/web/room/lesson"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
)

// boardFit is what TestBrowserBoardFitsServerNames measures in the page.
type boardFit struct {
	ViewW, ViewH, ScrollW float64
	// Heads is how many timeline row headings were measured.
	Heads int
	// Wrapped lists the headings whose items take more than one line.
	Wrapped []string
	// Problems lists what overlaps, is cut, or is missing, in words.
	Problems []string
	// KeysShown tells whether the key rows panel is displayed;
	// KeyRows is how many key rows, and KeyRowsInView how many of them
	// are wholly visible in the panel and in the viewport.
	KeysShown              bool
	KeyRows, KeyRowsInView int
	// OrdersInView tells whether the heading of the charges per order and
	// its first line are wholly visible, in their panel and on screen.
	OrdersInView bool
}

// boardFitMeasure looks at every timeline heading (its items side by side,
// none cut, the server's name whole), the chapter's caption (no two of its
// parts overlap) and the key rows panel (shown with its rows, or not at
// all). An item of a heading may give way to the others, but then wholly:
// it is either inside the heading or entirely clipped out of it.
const boardFitMeasure = `(() => {
  const out = {ViewW: innerWidth, ViewH: innerHeight, ScrollW: document.scrollingElement.scrollWidth,
    Heads: 0, Wrapped: [], Problems: [], KeysShown: false, KeyRows: 0, KeyRowsInView: 0};
  const overlap = (a, b) => a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 && b.top < a.bottom - 1;
  const inside = (a, b) => a.left >= b.left - 1 && a.right <= b.right + 1 && a.top >= b.top - 1 && a.bottom <= b.bottom + 1;
  const disjoint = (a, b) => a.right <= b.left + 1 || a.left >= b.right - 1 || a.bottom <= b.top + 1 || a.top >= b.bottom - 1;
  const shown = e => e.getClientRects().length > 0 && e.getBoundingClientRect().width > 1;
  const text = e => e.textContent.replace(/\s+/g, " ").trim();

  for (const head of document.querySelectorAll("#timeline .tl-head")) {
    out.Heads++;
    const hb = head.getBoundingClientRect();
    const items = [];
    for (const e of head.querySelectorAll("time, .srv, strong, code, .order, .amount, .who, .outcome > .badge")) {
      if (!shown(e)) continue;
      const b = e.getBoundingClientRect();
      const p = e.parentElement, clip = p === head || getComputedStyle(p).display === "contents" ? hb : p.getBoundingClientRect();
      if (inside(b, clip) && inside(b, hb)) items.push([e, b]);
      else if (!disjoint(b, clip)) out.Problems.push("heading item cut: " + text(e) + " in " + text(head));
    }
    const named = sel => items.find(([e]) => e.matches(sel));
    for (const [sel, what] of [["time", "time"], [".outcome > .badge", "outcome"]].concat(
        head.querySelector(".srv") ? [[".srv", "server"]] : [], head.querySelector(".order") ? [[".order", "order"]] : [])) {
      if (head.querySelector(sel) && !named(sel)) out.Problems.push("heading without its " + what + ": " + text(head));
    }
    const srv = head.querySelector(".srv");
    if (srv && srv.scrollWidth > srv.clientWidth + 1) out.Problems.push("server name cut: " + text(srv));
    for (let i = 0; i < items.length; i++) for (let j = i + 1; j < items.length; j++) {
      if (overlap(items[i][1], items[j][1])) out.Problems.push("heading items overlap: " + text(items[i][0]) + " / " + text(items[j][0]));
    }
    const t = named("time");
    if (t && items.some(([, b]) => b.top >= t[1].bottom - 1 || b.bottom <= t[1].top + 1)) out.Wrapped.push(text(head));
  }

  const caption = document.querySelector("#lesson.lesson-caption");
  if (caption) {
    const parts = [...caption.querySelectorAll(".eyebrow, #lesson-h, .lesson-nav button, .lesson-notes > summary, .caption-do, .caption-watch")].filter(shown);
    for (let i = 0; i < parts.length; i++) {
      const a = parts[i].getBoundingClientRect();
      if (a.left < -1 || a.right > innerWidth + 1) out.Problems.push("caption part off screen: " + text(parts[i]));
      for (let j = i + 1; j < parts.length; j++) {
        if (parts[i].contains(parts[j]) || parts[j].contains(parts[i])) continue;
        if (overlap(a, parts[j].getBoundingClientRect())) out.Problems.push("caption parts overlap: " + text(parts[i]).slice(0, 40) + " / " + text(parts[j]).slice(0, 40));
      }
    }
    // The notes open over the page, within the screen's width.
    const notes = caption.querySelector(".lesson-notes");
    notes.open = true;
    const nb = notes.querySelector(".lesson-notes-body").getBoundingClientRect();
    if (nb.left < -1 || nb.right > innerWidth + 1) out.Problems.push("the open notes are at x=" + nb.left + ".." + nb.right);
    notes.open = false;
  }

  const counters = document.querySelector(".panel-counters").getBoundingClientRect();
  const orders = [...document.querySelectorAll("#orders > h3, #orders > p, #orders li:first-child")];
  out.OrdersInView = orders.length >= 2 && orders.every(e => { const b = e.getBoundingClientRect();
    return b.height > 1 && b.top >= Math.max(counters.top, 0) - 1 && b.bottom <= Math.min(counters.bottom, innerHeight) + 1; });

  const keys = document.querySelector(".panel-keys");
  out.KeysShown = shown(keys);
  if (out.KeysShown) {
    const wrap = keys.querySelector(".table-wrap").getBoundingClientRect();
    // A row is in view when all its height is, in the panel's scrolling
    // box and on screen; a wide table may scroll sideways on a phone.
    const visible = b => b.height > 1 && b.top >= Math.max(wrap.top, 0) - 1 && b.bottom <= Math.min(wrap.bottom, innerHeight) + 1 &&
      b.left < Math.min(wrap.right, innerWidth) && b.right > Math.max(wrap.left, 0);
    for (const tr of keys.querySelectorAll("tbody tr")) {
      out.KeyRows++;
      if (visible(tr.getBoundingClientRect())) out.KeyRowsInView++;
    }
  }
  return out;
})()`

// TestBrowserBoardFitsServerNames projects the board, with a chapter
// running and without, at 1280x720, 1920x1080 and on a 390x844 phone,
// with no server name, a short one and long ones, after a paid, a
// replayed, a 409 and another student's payment. Every timeline heading
// shows its time, its server's name whole, its order and its outcome,
// none overlapping; on the projector sizes a heading is one line. The
// chapter's buttons never cover its title, and its notes open within the
// screen. With a chapter on a projector
// the charges per order are on screen. The key rows panel is either given
// way entirely or shows its rows; with a chapter on a 1920x1080 projector
// it shows them on screen, nothing of them smaller than 18 px.
//
// A server's name (Config.Name) is what its hub stamps on its events, and
// the other servers' events keep theirs: the rows draw the same either
// way, so one server on SQLite is enough here. The pictures go to
// $PAYTWICE_SCREENSHOTS/board-fit when it is set.
func TestBrowserBoardFitsServerNames(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	for _, name := range []string{"", "s1", "192.168.100.200:8081", "paytwice-classroom-eu-west.internal:8443"} {
		label := name
		if label == "" {
			label = "no"
		}
		t.Run(label+" server name", func(t *testing.T) {
			env := newRealClockEnv(t, Config{Name: name})
			ctx := liveBrowser(t, 1280, 720)
			liveStill(t, ctx)
			traffic := func(orders ...string) {
				t.Helper()
				body := func(order string) string { return fmt.Sprintf(`{"order_id":%q,"amount_satang":129900}`, order) }
				paid := uuid.NewString()
				env.pay(paid, body(orders[0]))
				env.pay(paid, body(orders[0])) // replayed
				env.pay(uuid.NewString(), body(orders[1]), "Cookie", sessionCookie+"="+uuid.NewString())
				held := uuid.NewString()
				release := env.holdGateway()
				first := make(chan struct{})
				go func() {
					defer close(first)
					_, _ = env.tryPay(held, body(orders[2]))
				}()
				waitRow(t, env, "the held key claimed", claimedOn(held, name))
				if r := env.pay(held, body(orders[2])); r.Status != http.StatusConflict {
					t.Fatalf("a second request while the first holds the key: %d %s", r.Status, r.Body)
				}
				release()
				<-first
			}
			check := func(layout string) {
				t.Helper()
				for _, size := range projectorsAndPhone {
					setBoardSize(t, ctx, size)
					liveDo(t, ctx, "back to the top", chromedp.Evaluate[chromedp.Void](`window.scrollTo(0, 0)`))
					liveWait(t, ctx, "every row drawn", waitUntilBound, `document.querySelectorAll("#timeline .outcome > .badge").length >= 5`)
					g := liveEval[boardFit](t, ctx, boardFitMeasure)
					where := fmt.Sprintf("%s at %dx%d", layout, size.w, size.h)
					boardScreenshot(t, ctx, fmt.Sprintf("board-fit/%s-%s-%dx%d.png", strings.ReplaceAll(label, ":", "_"), layout, size.w, size.h))
					if size.phone {
						liveDo(t, ctx, "scroll to the timeline", chromedp.Evaluate[chromedp.Void](`document.querySelector(".panel-timeline").scrollIntoView()`))
						boardScreenshot(t, ctx, fmt.Sprintf("board-fit/%s-%s-phone-timeline.png", strings.ReplaceAll(label, ":", "_"), layout))
					}
					if g.Heads < 4 {
						t.Errorf("%s: %d timeline headings measured", where, g.Heads)
					}
					for _, p := range g.Problems {
						t.Errorf("%s: %s", where, p)
					}
					if !size.phone && len(g.Wrapped) > 0 {
						t.Errorf("%s: timeline headings on more than one line: %q", where, g.Wrapped)
					}
					if g.ScrollW > g.ViewW+1 {
						t.Errorf("%s: the page is %v px wide in a %v px viewport", where, g.ScrollW, g.ViewW)
					}
					if layout == "lesson" && !size.phone && !g.OrdersInView {
						t.Errorf("%s: the charges per order are not wholly on screen", where)
					}
					if layout == "lesson" && size.w == 1920 {
						if small := liveEval[boardGeometry](t, ctx, boardMeasure).SmallText; len(small) > 0 {
							t.Errorf("%s: text below 18 px on the projector: %q", where, small)
						}
					}
					if g.KeysShown {
						// A panel shown shows its rows, if need be after a
						// scroll of the page; a chapter's board does not
						// scroll, so its rows are on screen.
						if layout == "plain" || size.phone {
							liveDo(t, ctx, "scroll to the key rows", chromedp.Evaluate[chromedp.Void](`document.querySelector(".panel-keys").scrollIntoView()`))
							g = liveEval[boardFit](t, ctx, boardFitMeasure)
						}
						if g.KeyRowsInView < min(g.KeyRows, 3) {
							t.Errorf("%s: %d of the %d key rows in view", where, g.KeyRowsInView, g.KeyRows)
						}
					} else if layout == "plain" || size.w == 1920 || size.phone {
						t.Errorf("%s: the key rows panel is hidden", where)
					}
				}
				boardViewport(t, ctx, 1280, 720)
			}

			liveOpen(t, ctx, env.URL+"/board")
			traffic("A-2201", "A-2202", "A-3307")
			check("plain")

			if err := env.Server.guidedLessons().start(context.Background(), "response-lost", "test"); err != nil {
				t.Fatal(err)
			}
			// The chapter's fault off, so that every answer arrives.
			if err := env.Server.faultSwitches().applyFaults(context.Background(), pay.Faults{}, "test"); err != nil {
				t.Fatal(err)
			}
			liveWait(t, ctx, "the chapter on the board", waitUntilBound, `!!document.querySelector(".lesson-caption")`)
			traffic("A-5501", "A-5502", "A-5503")
			check("lesson")
			liveNoCSPViolations(t, ctx)
		})
	}
}

// boardSize is a screen the board is measured on: a projector's, or a
// phone's.
type boardSize struct {
	w, h  int64
	phone bool
}

// projectorsAndPhone are the two projectors' sizes and a phone's.
var projectorsAndPhone = []boardSize{{1280, 720, false}, {1920, 1080, false}, {390, 844, true}}

// setBoardSize sizes the tab as s: exactly, as a projector is; a phone's
// screen emulated, touch and pixel ratio with it.
func setBoardSize(t *testing.T, ctx context.Context, s boardSize) {
	t.Helper()
	if s.phone {
		liveDo(t, ctx, "phone size", chromedp.EmulateViewport(s.w, s.h, chromedp.EmulateMobile, chromedp.EmulateScale(2)))
		return
	}
	boardViewport(t, ctx, s.w, s.h)
}

// boardOrders is what TestBrowserBoardThirtyStudents measures.
type boardOrders struct {
	ViewW, ViewH, ScrollW, ScrollH float64
	// Listed are the orders the board lists, as "scope order".
	Listed []string
	// Problems lists, in words, what is cut, hidden or off screen.
	Problems []string
}

// boardOrdersMeasure checks that every order the charges per order list
// is wholly visible (in the counters panel, without scrolling it, and on
// screen), and that the counters panel is not clipped: on screen, and
// everything in it shown without scrolling.
const boardOrdersMeasure = `(() => {
  const out = {ViewW: innerWidth, ViewH: innerHeight, ScrollW: document.scrollingElement.scrollWidth,
    ScrollH: document.scrollingElement.scrollHeight, Listed: [], Problems: []};
  const r = e => e.getBoundingClientRect();
  const inView = b => b.top >= -1 && b.left >= -1 && b.bottom <= innerHeight + 1 && b.right <= innerWidth + 1;
  const inside = (a, b) => a.left >= b.left - 1 && a.right <= b.right + 1 && a.top >= b.top - 1 && a.bottom <= b.bottom + 1;
  const text = e => e.textContent.replace(/\s+/g, " ").trim();
  const panel = document.querySelector(".panel-counters");
  const pb = r(panel);
  if (!panel.checkVisibility() || pb.height < 2) out.Problems.push("the counters panel is hidden");
  else if (!inView(pb)) out.Problems.push("the counters panel is at y=" + pb.top + ".." + pb.bottom + ", x=" + pb.left + ".." + pb.right);
  if (panel.scrollHeight > panel.clientHeight + 1) out.Problems.push("the counters panel clips " + (panel.scrollHeight - panel.clientHeight) + " px of its content");
  for (const tile of panel.querySelectorAll(".tile")) {
    if (!inside(r(tile), pb) || !inView(r(tile))) out.Problems.push("counter cut: " + text(tile));
    for (const e of [tile, ...tile.querySelectorAll("dt, dd")]) {
      if (e.scrollWidth > e.clientWidth + 1) out.Problems.push("counter overflows its tile: " + text(tile));
    }
  }
  const list = document.getElementById("orders");
  if (!list.checkVisibility() || r(list).height < 2) out.Problems.push("the charges per order are hidden");
  for (const li of list.querySelectorAll("li")) {
    out.Listed.push(li.title + " " + li.dataset.order);
    const b = r(li);
    if (!li.checkVisibility() || b.height < 2) out.Problems.push("order hidden: " + text(li));
    else if (!inside(b, pb) || !inView(b)) out.Problems.push("order cut: " + text(li) + " at y=" + b.top.toFixed(0) + ".." + b.bottom.toFixed(0));
  }
  return out;
})()`

// TestBrowserBoardThirtyStudents projects every chapter at 1920x1080 and
// at 1280x720 with thirty students' orders paid, some of them twice: the
// board lists every student's order, each wholly on screen, and the
// counters are not clipped. The students are thirty real HTTP clients,
// each with its own session; the board is one page in Chromium.
func TestBrowserBoardThirtyStudents(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	// The board paces one address's share by its own clock: the class
	// pays in one instant of it, and the teacher moves on seconds later,
	// not within the same second as the test would.
	teacher := sim.NewManualClock(time.Date(2026, 12, 4, 9, 0, 0, 0, time.UTC))
	env := newTestEnv(t, Config{BoardClock: teacher.Now})
	// A room's address: the join panel shows it and its QR code.
	env.Server.pages.join.listenAddr.Store(&net.TCPAddr{IP: net.ParseIP("192.0.2.7"), Port: 8080})
	// Every chapter of a full run, each measured at two sizes: longer in
	// all than liveBrowser's 90 s on a loaded machine, while each step
	// keeps its own bound.
	ctx := liveBrowserFor(t, 1920, 1080, 5*time.Minute)
	liveStill(t, ctx)
	students := make([]string, 30)
	for i := range students {
		students[i] = uuid.NewString()
	}
	liveOpen(t, ctx, env.URL+"/board")
	// Outside a chapter, with thirty orders listed, the timeline's newest
	// row is still on screen.
	for i, s := range students {
		body := fmt.Sprintf(`{"order_id":"A-%d","amount_satang":100}`, 1000+(i*2777)%9000)
		env.pay(uuid.NewString(), body, "Cookie", sessionCookie+"="+s)
	}
	liveWait(t, ctx, "thirty orders on the idle board", waitUntilBound, `document.querySelectorAll("#orders li").length >= 30`)
	for _, size := range [][2]int64{{1920, 1080}, {1280, 720}} {
		boardViewport(t, ctx, size[0], size[1])
		liveDo(t, ctx, "back to the top", chromedp.Evaluate[chromedp.Void](`window.scrollTo(0, 0)`))
		if top := liveEval[float64](t, ctx, `document.querySelector("#timeline > li").getBoundingClientRect().top`); top > float64(size[1])-60 {
			t.Errorf("outside a chapter at %dx%d, with thirty orders, the timeline's newest row starts at y=%.0f", size[0], size[1], top)
		}
		boardScreenshot(t, ctx, fmt.Sprintf("board-thirty/idle-%dx%d.png", size[0], size[1]))
	}
	boardViewport(t, ctx, 1920, 1080)
	for n, ch := range lesson.Build(env.Server.cfg.LockTimeout) {
		teacher.Advance(5 * time.Second)
		if err := env.Server.guidedLessons().start(context.Background(), ch.Slug, "test"); err != nil {
			t.Fatal(err)
		}
		// The chapter's faults off, so that every student's order is charged.
		if err := env.Server.faultSwitches().applyFaults(context.Background(), pay.Faults{}, "test"); err != nil {
			t.Fatal(err)
		}
		liveWait(t, ctx, "the chapter on the board", waitUntilBound, fmt.Sprintf(`(document.getElementById("lesson")||{dataset:{}}).dataset.slug === %q`, ch.Slug))
		// The class pays at once, as a class does: some chapters hold
		// each payment on purpose (the lock in memory waits a second
		// between its look-up and its insert), and thirty students paying
		// one after another would spend half a minute in those waits.
		want := map[string]bool{}
		paid := make([]error, len(students))
		var class sync.WaitGroup
		for i, s := range students {
			order := fmt.Sprintf("A-%d", 1000+(i*2777+n*131)%9000)
			body := fmt.Sprintf(`{"order_id":%q,"amount_satang":%d}`, order, 1000+i)
			cookie := sessionCookie + "=" + s
			want[views.ScopeLabel("session:"+scopeID(s))+" "+order] = true
			class.Go(func() {
				r, err := env.tryPay(uuid.NewString(), body, "Cookie", cookie)
				if err == nil && r.Status != http.StatusCreated {
					err = fmt.Errorf("%d %s", r.Status, r.Body)
				}
				if err == nil && i%7 == 3 { // a new key for the same order: charged twice
					_, err = env.tryPay(uuid.NewString(), body, "Cookie", cookie)
				}
				paid[i] = err
			})
		}
		class.Wait()
		for i, err := range paid {
			if err != nil {
				t.Fatalf("%s: student %d pays: %v", ch.Slug, i, err)
			}
		}
		liveWait(t, ctx, "thirty orders on the board", waitUntilBound, `document.querySelectorAll("#orders li").length >= 30`)
		for _, size := range []struct{ w, h int64 }{{1920, 1080}, {1280, 720}} {
			boardViewport(t, ctx, size.w, size.h)
			where := fmt.Sprintf("chapter %d %s at %dx%d", n+1, ch.Slug, size.w, size.h)
			g := liveEval[boardOrders](t, ctx, boardOrdersMeasure)
			if ch.Slug == "no-key" && size.h == 720 { // the README's picture
				boardScreenshot(t, ctx, fmt.Sprintf("board-thirty-%dx%d.png", size.w, size.h))
			}
			for _, p := range g.Problems {
				t.Errorf("%s: %s", where, p)
			}
			if g.ScrollH > g.ViewH+1 || g.ScrollW > g.ViewW+1 {
				t.Errorf("%s: the page scrolls: %vx%v of content", where, g.ScrollW, g.ScrollH)
			}
			listed := map[string]bool{}
			for _, l := range g.Listed {
				listed[l] = true
			}
			for w := range want {
				if !listed[w] {
					t.Errorf("%s: a student's order is not on the board: %s", where, w)
				}
			}
		}
		boardViewport(t, ctx, 1920, 1080)
	}

	// A phone's card names its order as the board lists it.
	phone := liveTab(t, ctx, true)
	liveDo(t, phone, "phone size", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile, chromedp.EmulateScale(2)))
	liveOpen(t, phone, env.URL+"/")
	liveDo(t, phone, "paying", liveClick("#pay"))
	liveWait(t, phone, "paid", waitUntilBound, paidNow)
	order := liveEval[string](t, phone, `document.getElementById("board-order").textContent`)
	if got := liveEval[string](t, phone, `document.getElementById("order-id").textContent`); got != order {
		t.Errorf("the card pays %s and sends its student to %s on the board", got, order)
	}
	liveWait(t, ctx, "the phone's order on the board", waitUntilBound, fmt.Sprintf(`!!document.querySelector('#orders li[data-order=%q]')`, order))
	liveNoCSPViolations(t, ctx)
	liveNoCSPViolations(t, phone)
}

// longOrders is what TestBrowserBoardLongOrderIDs measures.
type longOrders struct {
	Orders   int
	Problems []string
}

// longOrdersMeasure checks the charges per order list's orders: none runs
// out of the list or over another, and each keeps its count of charges
// inside its box.
const longOrdersMeasure = `(() => {
  const out = {Orders: 0, Problems: []};
  const r = e => e.getBoundingClientRect();
  const list = document.querySelector("#orders ul");
  const lb = r(list);
  const lis = [...list.querySelectorAll("li")].filter(li => li.checkVisibility());
  out.Orders = lis.length;
  lis.forEach((li, i) => {
    const b = r(li), id = li.dataset.order;
    if (b.left < lb.left - 1 || b.right > lb.right + 1) out.Problems.push(id + " runs out of the list: x=" + b.left.toFixed(0) + ".." + b.right.toFixed(0) + " in " + lb.left.toFixed(0) + ".." + lb.right.toFixed(0));
    const n = r(li.querySelector(".n"));
    if (n.width < 1 || n.left < b.left - 1 || n.right > b.right + 1) out.Problems.push(id + "'s count of charges is not inside its box");
    for (const other of lis.slice(i + 1)) {
      const o = r(other);
      const w = Math.min(b.right, o.right) - Math.max(b.left, o.left), h = Math.min(b.bottom, o.bottom) - Math.max(b.top, o.top);
      if (w > 1 && h > 1) out.Problems.push(id + " overlaps " + other.dataset.order);
    }
  });
  return out;
})()`

// TestBrowserBoardLongOrderIDs: a client that names its orders with long
// ids (a UUID with a prefix and a suffix, 59 characters; the API takes up
// to 64) sees them in the charges per order list each in its own box, cut
// where the box ends, with its count of charges in view, on a projector
// at 1280x720 and 1920x1080 and on a 390x844 phone; before, each id ran
// over its neighbours' boxes on the board and hid their counts.
func TestBrowserBoardLongOrderIDs(t *testing.T) {
	browserFullOnly(t)
	browserSideBySide(t)
	env := newTestEnv(t, Config{})
	ctx := liveBrowser(t, 1280, 720)
	liveOpen(t, ctx, env.URL+"/board")
	const orders = 8
	for i := range orders {
		order := fmt.Sprintf("order-%s-attempt-%08d", uuid.NewString(), i)
		if len(order) != 59 {
			t.Fatalf("order id %q is %d characters", order, len(order))
		}
		key := uuid.NewString()
		body := fmt.Sprintf(`{"order_id":%q,"amount_satang":129900}`, order)
		env.pay(key, body)
		if i == 0 {
			env.pay(uuid.NewString(), body) // the same order paid twice: its box is the alarm's
		}
	}
	liveWait(t, ctx, "the orders listed", waitUntilBound, fmt.Sprintf(`document.querySelectorAll("#orders li").length === %d`, orders))
	for _, size := range projectorsAndPhone {
		setBoardSize(t, ctx, size)
		liveDo(t, ctx, "to the orders", chromedp.Evaluate[chromedp.Void](`document.getElementById("orders").scrollIntoView()`))
		boardScreenshot(t, ctx, fmt.Sprintf("board-long-orders-%dx%d.png", size.w, size.h))
		m := liveEval[longOrders](t, ctx, longOrdersMeasure)
		if m.Orders != orders {
			t.Errorf("%dx%d: %d orders shown, want %d", size.w, size.h, m.Orders, orders)
		}
		for _, p := range m.Problems {
			t.Errorf("%dx%d: %s", size.w, size.h, p)
		}
	}
}

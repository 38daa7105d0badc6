package views

import (
	"bytes"
	"context"
	"paytwice/pay"
	"strings"
	"testing"
	"time"

	"github.com/a-h/templ"
	"golang.org/x/net/html"
)

// render renders a component and parses it as the body of a document.
func render(t *testing.T, c templ.Component) *html.Node {
	t.Helper()
	var buf bytes.Buffer
	if err := c.Render(context.Background(), &buf); err != nil {
		t.Fatal(err)
	}
	doc, err := html.Parse(strings.NewReader(buf.String()))
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// renderRow renders table rows inside a table, where a parser keeps them.
func renderRow(t *testing.T, c templ.Component) *html.Node {
	t.Helper()
	var buf bytes.Buffer
	if err := c.Render(context.Background(), &buf); err != nil {
		t.Fatal(err)
	}
	doc, err := html.Parse(strings.NewReader("<table><tbody>" + buf.String() + "</tbody></table>"))
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

func attr(n *html.Node, name string) (string, bool) {
	for _, a := range n.Attr {
		if a.Key == name {
			return a.Val, true
		}
	}
	return "", false
}

func hasClass(n *html.Node, class string) bool {
	v, _ := attr(n, "class")
	for _, c := range strings.Fields(v) {
		if c == class {
			return true
		}
	}
	return false
}

// findAll returns the elements (including those inside template
// contents) for which match is true, in document order.
func findAll(n *html.Node, match func(*html.Node) bool) []*html.Node {
	var out []*html.Node
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode && match(n) {
			out = append(out, n)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return out
}

func byID(t *testing.T, doc *html.Node, id string) *html.Node {
	t.Helper()
	got := findAll(doc, func(n *html.Node) bool { v, _ := attr(n, "id"); return v == id })
	if len(got) != 1 {
		t.Fatalf("%d elements with id %q", len(got), id)
	}
	return got[0]
}

func byClass(doc *html.Node, class string) []*html.Node {
	return findAll(doc, func(n *html.Node) bool { return hasClass(n, class) })
}

func text(n *html.Node) string {
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return strings.Join(strings.Fields(b.String()), " ")
}

var t0 = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

func sampleRow() TimelineRow {
	return TimelineRow{ID: "tl-rq_1", Time: t0, Title: "POST /v1/payments", Key: "8e03978e-40d5-43e8-bc93-6894a57f9324",
		OrderID: "A-1001", Amount: 129900, Scope: "session:abcdef", Outcome: Badge{"201 replayed", ToneInfo},
		Steps: []Step{
			{From: LaneBrowser, To: LaneServer, Label: "POST + key"},
			{From: LaneServer, To: LaneDatabase, Label: "INSERT key: started", Badge: Badge{"claimed", ToneOK}},
			{From: LaneServer, To: LaneServer, Label: "holding 800ms", Badge: Badge{"delay", ToneWarn}},
			{ID: "tl-rq_1-resp", From: LaneServer, To: LaneBrowser, Lost: true, Label: "201 never arrives", Badge: Badge{"lost response", ToneBad}},
		}}
}

func TestTimelineRow(t *testing.T) {
	doc := render(t, TimelineRowView(sampleRow()))
	row := byID(t, doc, "tl-rq_1")
	steps := byClass(row, "step")

	t.Run("one list item per step, placed between its lanes", func(t *testing.T) {
		want := []string{"step l1-2 ltr", "step l2-3 ltr", "step at2", "step l1-2 rtl lost"}
		if len(steps) != len(want) {
			t.Fatalf("%d steps, want %d", len(steps), len(want))
		}
		for i, s := range steps {
			if c, _ := attr(s, "class"); c != want[i] {
				t.Errorf("step %d has class %q, want %q", i, c, want[i])
			}
		}
	})
	t.Run("a step that a later event replaces has an id", func(t *testing.T) {
		if id, _ := attr(steps[3], "id"); id != "tl-rq_1-resp" {
			t.Fatalf("id %q", id)
		}
	})
	t.Run("each arrow says in words where it goes, for screen readers", func(t *testing.T) {
		if got := text(byClass(steps[0], "sr-only")[0]); got != "Browser to Server:" {
			t.Errorf("%q", got)
		}
		if got := text(byClass(steps[3], "sr-only")[0]); got != "Server to Browser, never arrived:" {
			t.Errorf("%q", got)
		}
	})
	t.Run("the heading shows the short key, the order, baht and the outcome", func(t *testing.T) {
		head := text(byClass(row, "tl-head")[0])
		for _, want := range []string{"09:00:00.000", "8e03978e…", "A-1001", "฿1,299.00", "201 replayed"} {
			if !strings.Contains(head, want) {
				t.Errorf("heading %q lacks %q", head, want)
			}
		}
	})
	t.Run("every badge has a word, never colour alone", func(t *testing.T) {
		for _, b := range byClass(doc, "badge") {
			if text(b) == "" {
				t.Errorf("an empty badge: %v", b.Attr)
			}
		}
	})
}

func TestTimelineRowServer(t *testing.T) {
	t.Run("a server of its own draws the row as it always did, with no server", func(t *testing.T) {
		row := byID(t, render(t, TimelineRowView(sampleRow())), "tl-rq_1")
		if c, _ := attr(row, "class"); c != "tl-row" {
			t.Errorf("class %q", c)
		}
		if n := len(byClass(row, "srv")); n != 0 {
			t.Errorf("%d server chips", n)
		}
	})
	t.Run("a row with a server names it after the time, in words and a colour of its own", func(t *testing.T) {
		r := sampleRow()
		r.Server = "127.0.0.1:8081"
		row := byID(t, render(t, TimelineRowView(r)), "tl-rq_1")
		chips := byClass(row, "srv")
		if len(chips) != 1 || text(chips[0]) != "server 127.0.0.1:8081" {
			t.Fatalf("chips %d, text %q", len(chips), text(chips[0]))
		}
		if title, _ := attr(chips[0], "title"); title != "handled by the server 127.0.0.1:8081" {
			t.Errorf("title %q", title)
		}
		if head := text(byClass(row, "tl-head")[0]); !strings.HasPrefix(head, "09:00:00.000 server 127.0.0.1:8081 POST /v1/payments") {
			t.Errorf("heading %q", head)
		}
		c, _ := attr(row, "class")
		if !strings.HasPrefix(c, "tl-row srv-") {
			t.Errorf("class %q", c)
		}
		// The colour follows from the name alone: every server draws it alike.
		if again, _ := attr(byID(t, render(t, TimelineRowView(r)), "tl-rq_1"), "class"); again != c {
			t.Errorf("class %q, then %q", c, again)
		}
	})
	t.Run("the first servers' usual names get colours of their own", func(t *testing.T) {
		seen := map[string]string{}
		for _, name := range []string{"s1", "s2", "s3"} {
			c := rowClass(TimelineRow{Server: name})
			if other, dup := seen[c]; dup {
				t.Errorf("%s and %s share %q", other, name, c)
			}
			seen[c] = name
		}
	})
}

func TestKeyRow(t *testing.T) {
	k := KeyRow{ID: "k-1", Scope: "token:0a1b2c3d", Key: "key-number-one-is-long", Fingerprint: "0123456789abcdef",
		OrderID: "A-1", Amount: 100, Status: "started", Created: t0, Hits: 2}
	t.Run("a started row says started and has no code yet", func(t *testing.T) {
		doc := renderRow(t, KeyRowView(k, t0.Add(3*time.Second), false))
		row := byID(t, doc, "k-1")
		got := text(row)
		for _, want := range []string{"key-numb…", "started", "—", "0123456789", "A-1", "token 0a1b", "3 s", "2"} {
			if !strings.Contains(got, want) {
				t.Errorf("row %q lacks %q", got, want)
			}
		}
		if _, ok := attr(row, "hx-swap-oob"); ok {
			t.Error("an in-page row is marked out-of-band")
		}
	})
	t.Run("a done row shows its saved code, and can replace itself", func(t *testing.T) {
		k.Status, k.Code = "done", 201
		row := byID(t, renderRow(t, KeyRowView(k, t0, true)), "k-1")
		if got := text(row); !strings.Contains(got, "done") || !strings.Contains(got, "201") {
			t.Errorf("row %q", got)
		}
		if v, _ := attr(row, "hx-swap-oob"); v != "true" {
			t.Errorf("hx-swap-oob=%q", v)
		}
	})
}

func TestCounters(t *testing.T) {
	t.Run("no charges yet", func(t *testing.T) {
		doc := render(t, CountersView(Counters{}, false))
		if !strings.Contains(text(doc), "No charges yet") {
			t.Fatal(text(doc))
		}
	})
	t.Run("an order charged twice is red and says so", func(t *testing.T) {
		c := Counters{Requests: 4, Charges: 3, Replays: 1, Conflicts: 1, Twice: 1,
			Orders: []OrderCount{{Scope: "session:aa", OrderID: "A-7", Charges: 2}, {Scope: "session:bb", OrderID: "A-8", Charges: 1}}}
		doc := render(t, CountersView(c, true))
		root := byID(t, doc, "counters")
		if v, _ := attr(root, "hx-swap-oob"); v != "true" {
			t.Error("not marked for an out-of-band swap")
		}
		twice := findAll(doc, func(n *html.Node) bool { return n.Data == "li" && hasClass(n, "twice") })
		if len(twice) != 1 || !strings.Contains(text(twice[0]), "A-7") || !strings.Contains(text(twice[0]), "charged twice") {
			t.Fatalf("twice items: %d", len(twice))
		}
		if a := byClass(doc, "alarm"); len(a) != 1 || !strings.Contains(text(a[0]), "1 order was charged more than once") {
			t.Fatal("no alarm")
		}
		tiles := findAll(doc, func(n *html.Node) bool { return n.Data == "dd" })
		if len(tiles) != 6 || text(tiles[0]) != "4" || text(tiles[1]) != "3" {
			t.Fatalf("tiles %d", len(tiles))
		}
	})
}

func TestFaultFields(t *testing.T) {
	f := FaultSwitches{Faults: pay.Faults{Server: pay.ServerFaults{DelayMS: 800, ResponseLost: true}, Gateway: pay.GatewayFaults{LatencyMS: 1234}}}
	doc := render(t, FaultFields(f, false))
	inputs := findAll(doc, func(n *html.Node) bool { _, ok := attr(n, "data-fault"); return ok })
	// The two delays, then every on/off switch.
	if want := 2 + len(pay.FaultSwitches); len(inputs) != want {
		t.Fatalf("%d switches, want %d", len(inputs), want)
	}
	for _, in := range inputs {
		field, _ := attr(in, "data-fault")
		id, _ := attr(in, "id")
		labels := findAll(doc, func(n *html.Node) bool { v, _ := attr(n, "for"); return n.Data == "label" && v == id })
		if len(labels) != 1 {
			t.Errorf("%s has %d labels", field, len(labels))
		}
		_, checked := attr(in, "checked")
		if in.Data == "input" && checked != (field == "server.response_lost") {
			t.Errorf("%s checked=%v", field, checked)
		}
	}
	selected := findAll(doc, func(n *html.Node) bool { _, ok := attr(n, "selected"); return n.Data == "option" && ok })
	if len(selected) != 2 || text(selected[0]) != "800 ms" || text(selected[1]) != "1234 ms" {
		t.Fatalf("selected options: %d", len(selected))
	}
	active := text(render(t, ActiveFaults(f, false)))
	if active != "delay 800 ms response lost gateway latency 1234 ms" {
		t.Fatalf("active faults %q", active)
	}
}

func TestFrames(t *testing.T) {
	t.Run("a new row goes to the top of the timeline", func(t *testing.T) {
		doc := render(t, FrameNewRow(sampleRow()))
		oob := findAll(doc, func(n *html.Node) bool { v, _ := attr(n, "hx-swap-oob"); return v == "afterbegin:#timeline" })
		if len(oob) != 1 || len(byClass(oob[0], "tl-row")) != 1 {
			t.Fatal("no afterbegin:#timeline wrapper around one row")
		}
	})
	t.Run("a step goes to the end of its row", func(t *testing.T) {
		doc := render(t, FrameStep("tl-rq_1", Step{From: LaneServer, To: LaneGateway, Label: "charge(key)"}))
		if oob := findAll(doc, func(n *html.Node) bool { v, _ := attr(n, "hx-swap-oob"); return v == "beforeend:#tl-rq_1-steps" }); len(oob) != 1 {
			t.Fatal("no beforeend wrapper")
		}
	})
	t.Run("table rows travel inside a template, so a parser keeps them", func(t *testing.T) {
		var buf bytes.Buffer
		_ = FrameNewRow(sampleRow()).Render(context.Background(), &buf)
		_ = FrameInsertKeys([]KeyRow{{ID: "k-9", Status: "started"}}, t0).Render(context.Background(), &buf)
		// Parsed as htmx does: as the content of one template element.
		doc, err := html.Parse(strings.NewReader("<template>" + buf.String() + "</template>"))
		if err != nil {
			t.Fatal(err)
		}
		if rows := findAll(doc, func(n *html.Node) bool { v, _ := attr(n, "id"); return n.Data == "tr" && v == "k-9" }); len(rows) != 1 {
			t.Fatal("the key row was lost next to the timeline fragment")
		}
	})
	t.Run("new key rows go to the top of the key table, newest first, in one wrapper", func(t *testing.T) {
		var buf bytes.Buffer
		rows := []KeyRow{{ID: "k-3", Key: "third", Status: "started"}, {ID: "k-2", Key: "second", Status: "done", Code: 201}}
		if err := FrameInsertKeys(rows, t0).Render(context.Background(), &buf); err != nil {
			t.Fatal(err)
		}
		doc, err := html.Parse(strings.NewReader("<template>" + buf.String() + "</template>"))
		if err != nil {
			t.Fatal(err)
		}
		oob := findAll(doc, func(n *html.Node) bool { _, ok := attr(n, "hx-swap-oob"); return ok })
		if len(oob) != 1 || oob[0].Data != "tbody" {
			t.Fatalf("%d out-of-band elements, want one tbody", len(oob))
		}
		if v, _ := attr(oob[0], "hx-swap-oob"); v != "afterbegin:#keys-body" {
			t.Fatalf("hx-swap-oob=%q", v)
		}
		var ids []string
		for _, tr := range findAll(oob[0], func(n *html.Node) bool { return n.Data == "tr" }) {
			id, _ := attr(tr, "id")
			ids = append(ids, id)
		}
		if strings.Join(ids, " ") != "k-3 k-2" {
			t.Fatalf("rows %q, want k-3 k-2 in that order", ids)
		}
		if got := text(byID(t, doc, "k-2")); !strings.Contains(got, "done") || !strings.Contains(got, "201") {
			t.Errorf("row k-2 %q lacks its status and code", got)
		}
	})
	t.Run("delete names its element", func(t *testing.T) {
		n := byID(t, render(t, FrameDelete("c-ch_1")), "c-ch_1")
		if v, _ := attr(n, "hx-swap-oob"); v != "delete" {
			t.Fatalf("hx-swap-oob=%q", v)
		}
	})
}

func TestLivePanels(t *testing.T) {
	l := Live{Epoch: "a1b2c3d4e5f6", Seq: 42, Now: t0, Timeline: []TimelineRow{sampleRow()},
		Charges: []ChargeRow{{ID: "c-1", Charge: "ch_1", OrderID: "A-1001", Amount: 129900, Time: t0, Repeat: true}}}
	doc := render(t, LivePanels(l, false))
	live := byID(t, doc, "live")
	if v, _ := attr(live, "sse-connect"); v != "/events?since=a1b2c3d4e5f6-42" {
		t.Errorf("sse-connect=%q: the stream must resume right after the state drawn", v)
	}
	// The board's stream says it is the board's: it is sent every event
	// as it happens, where a phone gets the class's payments in rounds.
	board := byID(t, render(t, LivePanels(l, true)), "live")
	if v, _ := attr(board, "sse-connect"); v != "/events?since=a1b2c3d4e5f6-42&view="+BoardStreamView {
		t.Errorf("the board's sse-connect=%q", v)
	}
	if v, _ := attr(live, "hx-ext"); v != "sse" {
		t.Errorf("hx-ext=%q", v)
	}
	if sinks := findAll(doc, func(n *html.Node) bool { v, _ := attr(n, "sse-swap"); return v == "frame" }); len(sinks) != 1 {
		t.Errorf("%d frame sinks", len(sinks))
	} else if v, _ := attr(sinks[0], "hx-swap"); v != "none" {
		t.Errorf("the sink swaps %q: only the out-of-band parts may land", v)
	}
	tl := byID(t, doc, "timeline")
	if v, _ := attr(tl, "aria-live"); v != "polite" {
		t.Errorf("timeline aria-live=%q", v)
	}
	if v, _ := attr(tl, "tabindex"); v != "0" {
		t.Error("the scrolling timeline cannot be reached by keyboard")
	}
	if n := len(byClass(doc, "explain")); n != 4 {
		t.Errorf("%d \"What am I looking at?\" notes, want one per panel", n)
	}
	charge := byID(t, doc, "c-1")
	if !hasClass(charge, "twice") || !strings.Contains(text(charge), "charged again") {
		t.Errorf("a repeated charge is not marked: %q", text(charge))
	}
}

func TestPagesNeedNoInlineCode(t *testing.T) {
	pages := map[string]templ.Component{
		"checkout": CheckoutPage(Checkout{OrderID: "A-1001", Amount: 129900, Key: "8e03978e-40d5-43e8-bc93-6894a57f9324",
			BackoffBaseMS: 500, BackoffCapMS: 8000, MaxRetries: 5, Presenter: true}),
		"board": BoardPage(Board{Join: Join{URLs: []string{"http://192.0.2.7:8080", "http://localhost:8080"}, QR: "/join/qr.png"}}),
	}
	for name, c := range pages {
		t.Run(name+" has no inline script, style or handler", func(t *testing.T) {
			doc := render(t, c)
			for _, n := range findAll(doc, func(*html.Node) bool { return true }) {
				if n.Data == "script" {
					if src, _ := attr(n, "src"); !strings.HasPrefix(src, "/static/") {
						t.Errorf("a script without a local src: %v", n.Attr)
					}
				}
				if n.Data == "style" {
					t.Error("a style element")
				}
				for _, a := range n.Attr {
					if a.Key == "style" || strings.HasPrefix(a.Key, "on") {
						t.Errorf("<%s %s=%q>", n.Data, a.Key, a.Val)
					}
					if (a.Key == "src" || a.Key == "href") && strings.Contains(a.Val, "//") && !strings.HasPrefix(a.Val, "http://192.0.2.7") {
						t.Errorf("<%s %s=%q> leaves the origin", n.Data, a.Key, a.Val)
					}
				}
			}
		})
	}
	t.Run("the checkout shows the key in full and short, the amount in baht", func(t *testing.T) {
		doc := render(t, pages["checkout"])
		if got := text(byID(t, doc, "key-full")); got != "8e03978e-40d5-43e8-bc93-6894a57f9324" {
			t.Errorf("full key %q", got)
		}
		if got := text(byID(t, doc, "key-short")); got != "8e03978e…" {
			t.Errorf("short key %q", got)
		}
		if got := text(byID(t, doc, "pay")); got != "Pay ฿1,299.00" {
			t.Errorf("button %q", got)
		}
		if v, _ := attr(byID(t, doc, "amount"), "value"); v != "1,299.00" {
			t.Errorf("amount %q", v)
		}
	})
	t.Run("the board shows where to join", func(t *testing.T) {
		doc := render(t, pages["board"])
		if got := text(byClass(doc, "join-url")[0]); got != "http://192.0.2.7:8080" {
			t.Errorf("join url %q", got)
		}
		if _, disabled := attr(byID(t, doc, "faults"), "disabled"); !disabled {
			t.Error("a viewer who is not the presenter gets enabled switches")
		}
	})
}

func TestHelpers(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{ScopeLabel("session:0123abcd"), "browser 0123"},
		{ScopeLabel("token:ffee"), "token ffee"},
		{ScopeLabel("anonymous"), "anonymous"},
		{ShortKey("short"), "short"},
		{ShortKey("0123456789abc"), "01234567…"},
		{Age(t0, t0.Add(-90*time.Second)), "1 min"},
		{Age(t0, t0.Add(-3*time.Hour)), "3 h"},
		{Age(t0, t0.Add(-72*time.Hour)), "3 d"},
		{laneSpan(Step{From: LaneGateway, To: LaneServer}), "l2-4 rtl"},
		{laneSpan(Step{From: LaneBrowser, To: LaneGateway}), "l1-4 ltr"},
	} {
		if tc.in != tc.want {
			t.Errorf("got %q, want %q", tc.in, tc.want)
		}
	}
}

package board

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"

	"paytwice/pay"
	"paytwice/store"
	"paytwice/views"
)

// framePage is what a page shows of the counters, kept as htmx keeps it:
// each frame's out-of-band fragments applied to it in turn (replace by
// id, delete, insert before an element or at the end of one).
type framePage struct {
	mu      sync.Mutex
	root    *html.Node
	inserts int    // frames that inserted an order into the list
	last    uint64 // the id of the newest frame applied
}

func newFramePage() *framePage {
	root := &html.Node{Type: html.ElementNode, Data: "div", DataAtom: atom.Div}
	root.AppendChild(&html.Node{Type: html.ElementNode, Data: "div", DataAtom: atom.Div, Attr: []html.Attribute{{Key: "id", Val: "counters"}}})
	return &framePage{root: root}
}

func (pg *framePage) apply(t *testing.T, id uint64, data string) {
	nodes, err := html.ParseFragment(strings.NewReader(data), &html.Node{Type: html.ElementNode, Data: "body", DataAtom: atom.Body})
	if err != nil {
		t.Errorf("frame %d: %v", id, err)
		return
	}
	pg.mu.Lock()
	defer pg.mu.Unlock()
	if strings.Contains(data, `hx-swap-oob="beforebegin:#o-`) || strings.Contains(data, `hx-swap-oob="beforeend:#orders-list"`) {
		pg.inserts++
	}
	for _, n := range nodes {
		pg.swap(n)
	}
	pg.last = max(pg.last, id)
}

// swap applies one fragment of a frame; a template holds fragments.
func (pg *framePage) swap(n *html.Node) {
	if n.Type != html.ElementNode {
		return
	}
	if n.DataAtom == atom.Template {
		for c := n.FirstChild; c != nil; {
			next := c.NextSibling
			pg.swap(c)
			c = next
		}
		return
	}
	how, ok := attr(n, "hx-swap-oob")
	if !ok {
		return
	}
	style, sel, _ := strings.Cut(how, ":")
	if sel == "" {
		sel = "#" + must(attr(n, "id"))
	}
	target := byID(pg.root, strings.TrimPrefix(sel, "#"))
	if target == nil {
		return
	}
	children := func() []*html.Node {
		var out []*html.Node
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			out = append(out, c)
		}
		for _, c := range out {
			n.RemoveChild(c)
		}
		return out
	}
	switch style {
	case "true", "outerHTML":
		if n.Parent != nil {
			n.Parent.RemoveChild(n)
		}
		n.Attr = slices.DeleteFunc(n.Attr, func(a html.Attribute) bool { return a.Key == "hx-swap-oob" })
		target.Parent.InsertBefore(n, target)
		target.Parent.RemoveChild(target)
	case "delete":
		target.Parent.RemoveChild(target)
	case "beforebegin":
		for _, c := range children() {
			target.Parent.InsertBefore(c, target)
		}
	case "beforeend":
		for _, c := range children() {
			target.AppendChild(c)
		}
	case "afterbegin":
		first := target.FirstChild
		for _, c := range children() {
			target.InsertBefore(c, first)
		}
	}
}

func must(s string, _ bool) string { return s }

func attr(n *html.Node, key string) (string, bool) {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val, true
		}
	}
	return "", false
}

func byID(n *html.Node, id string) *html.Node {
	for d := range n.Descendants() {
		if v, ok := attr(d, "id"); ok && v == id && d.Type == html.ElementNode {
			return d
		}
	}
	return nil
}

func hasClass(n *html.Node, class string) bool {
	v, _ := attr(n, "class")
	return slices.Contains(strings.Fields(v), class)
}

func text(n *html.Node) string {
	var b strings.Builder
	for d := range n.Descendants() {
		if d.Type == html.TextNode {
			b.WriteString(d.Data)
		}
	}
	return strings.Join(strings.Fields(b.String()), " ")
}

// shownOrders reads the charges per order list: its paragraphs, then
// each order as its number, whose it is, its count and its colour, and
// whether it names whose it is; an item twice is there twice.
func shownOrders(root *html.Node) []string {
	orders := byID(root, "orders")
	if orders == nil {
		return []string{"no list"}
	}
	var out []string
	for d := range orders.Descendants() {
		if d.Type != html.ElementNode {
			continue
		}
		switch {
		case d.DataAtom == atom.P:
			out = append(out, "p: "+text(d))
		case d.DataAtom == atom.Li:
			order, _ := attr(d, "data-order")
			title, _ := attr(d, "title")
			class, _ := attr(d, "class")
			n, who := "", ""
			for c := range d.Descendants() {
				if hasClass(c, "n") {
					n = text(c)
				}
				if hasClass(c, "who") {
					who = " (" + text(c) + ")"
				}
			}
			out = append(out, fmt.Sprintf("%s of %s%s: %s %s", order, title, who, n, class))
		}
	}
	return out
}

// TestOrdersListOnThePagesIsTheBooks: the charges per order list changes
// on the pages an order at a time. After many payments (orders charged
// once and twice, the same number in two browsers, a list that turns
// over, a caller over its share whose charges are counted with no frame,
// pages opened half way and just after that caller) every page's list, as its frames left it,
// is the list a page drawn now gets, and each order's count, the orders
// charged more than once and those left out are what the database holds.
func TestOrdersListOnThePagesIsTheBooks(t *testing.T) {
	wall := newHeldWall()
	books, b := newBooksBoard(t, wall)

	var pages []*framePage
	watch := func() {
		pg := newFramePage()
		pages = append(pages, pg)
		s := b.open(t)
		go func() {
			for {
				id, data, _, err := s.next()
				if err != nil {
					return
				}
				pg.apply(t, id, data)
			}
		}()
	}
	watch()
	waitUntil(t, "the page to be open", func() bool { return b.Viewers() == 1 })

	ctx := context.Background()
	n := 0
	// pay saves a charge for order in the books and publishes its events.
	pay1 := func(scope, order string) {
		t.Helper()
		i := n
		n++
		evs := paymentEvents(i)
		key := evs[0].Key
		req := pay.ClaimRequest{Scope: scope, Key: key, Method: "POST", Path: "/v1/payments", Fingerprint: "fp", OrderID: order, AmountSatang: 129900}
		res, err := books.Claim(ctx, req)
		if err != nil || !res.Claimed {
			t.Fatalf("claim %d: %+v %v", i, res, err)
		}
		ch := &pay.Charge{ID: evs[4].Charge, Scope: scope, Key: key, OrderID: order, AmountSatang: 129900, GatewayRef: "gw_" + strconv.Itoa(i), CreatedAt: wall.Now()}
		if _, err := books.Complete(ctx, pay.Completion{ClaimRequest: req, Claim: res.Claim, Status: 201, Body: ch.ResponseBody(), Charge: ch}); err != nil {
			t.Fatalf("complete %d: %v", i, err)
		}
		for _, e := range evs {
			e.Scope, e.OrderID = scope, order
			b.hub.Publish(e)
		}
	}
	browser := func(i int) string { return "session:" + []string{"aaaa", "bbbb"}[i%2] + "-student" }
	// Orders T-0 to T-59 in two browsers: the first 30 charged twice (the
	// second time after the list turned over), the rest once.
	round := func(from, to int) {
		for i := from; i < to; i++ {
			pay1(browser(i), fmt.Sprintf("T-%d", (i%120)/2))
			wall.advance(100 * time.Millisecond) // a class's pace: no busy mode, every caller within its share
			if i%40 == 39 {
				b.caughtUp(t)
			}
		}
		b.caughtUp(t)
	}
	round(0, 90)
	watch() // a page opened half way: drawn whole, then changed with the others
	waitUntil(t, "the second page to be open", func() bool { return b.Viewers() == 2 })
	round(90, 125)
	// A caller over its share: its requests are counted, not drawn, and
	// its charges reach the list with no frame of their own.
	for i := range 30 {
		pay1("session:cccc-flood", fmt.Sprintf("F-%d", i))
	}
	b.caughtUp(t)
	// A page opened while the last of them may still wait to be drawn:
	// it is drawn with them, the others are not yet.
	watch()
	waitUntil(t, "the third page to be open", func() bool { return b.Viewers() == 3 })
	wall.advance(2 * time.Second)
	round(125, 140)
	pay1(browser(1), "T-1") // charged a third time
	b.caughtUp(t)
	last := b.hub.LastSeq()

	// What a page drawn now shows, and what the books hold.
	var drawn bytes.Buffer
	if err := views.OrdersView(b.Snapshot().Counters, false).Render(ctx, &drawn); err != nil {
		t.Fatal(err)
	}
	nodes, err := html.ParseFragment(&drawn, &html.Node{Type: html.ElementNode, Data: "body", DataAtom: atom.Body})
	if err != nil {
		t.Fatal(err)
	}
	holder := &html.Node{Type: html.ElementNode, Data: "div", DataAtom: atom.Div}
	for _, nd := range nodes {
		holder.AppendChild(nd)
	}
	want := shownOrders(holder)
	charges, err := books.RecentCharges(ctx, 5000)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for _, c := range charges {
		counts[views.ScopeLabel(c.Scope)+" "+c.OrderID]++
	}
	twice, once, listedOnce := 0, 0, 0
	for _, c := range counts {
		if c > 1 {
			twice++
		} else {
			once++
		}
	}
	for _, l := range want {
		order, rest, ok := strings.Cut(l, " of ")
		if !ok {
			continue
		}
		label, _, _ := strings.Cut(rest, ":")
		label, _, _ = strings.Cut(label, " (")
		c := counts[label+" "+order]
		if !strings.Contains(l, ": "+strconv.Itoa(c)+"× ") {
			t.Errorf("the list says %q; the books hold %d charges for that order", l, c)
		}
		if c == 1 {
			listedOnce++
		}
	}
	wantAlarm := fmt.Sprintf("p: %d orders were charged more than once.", twice)
	wantMore := fmt.Sprintf("p: and %d orders more, charged once: not listed here. Your own card says how your order ended.", once-listedOnce)
	if !slices.Contains(want, wantAlarm) || !slices.Contains(want, wantMore) || len(want) != OrdersListed+2 {
		t.Fatalf("a page drawn now shows %d lines, want the alarm %q, the note %q and %d orders: %q", len(want), wantAlarm, wantMore, OrdersListed, want)
	}

	for i, pg := range pages {
		var got []string
		waitUntil(t, fmt.Sprintf("page %d to get the last event's frame (%d)", i, last), func() bool {
			pg.mu.Lock()
			defer pg.mu.Unlock()
			if pg.last < last {
				return false
			}
			// No event follows: a frame after the last event's (a tick,
			// a refresh) leaves the list as it was.
			got = shownOrders(pg.root)
			return true
		})
		if !slices.Equal(got, want) {
			t.Errorf("page %d shows, after its frames:\n%s\nwant, as a page drawn now and the books:\n%s", i, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		pg.mu.Lock()
		inserts := pg.inserts
		pg.mu.Unlock()
		if inserts == 0 {
			t.Errorf("page %d: no frame inserted an order: the list was drawn whole, not changed an order at a time", i)
		}
	}
}

// TestMovedInFrame: a page resumed from another server's frames gets,
// after the last frame made, a refresh that sets what this board draws of
// its own as its frames leave it: the charges per order list whole, every
// counter, the step bar, and the room mark that has the page ask for the
// lesson and the vote.
func TestMovedInFrame(t *testing.T) {
	b := newTestBoard(t, nil, 10)
	b.open(t) // the projector draws frames for a page
	waitUntil(t, "the page to be open", func() bool { return b.Viewers() == 1 })
	for i := range 3 {
		for _, e := range paymentEvents(i) {
			b.hub.Publish(e)
		}
	}
	b.caughtUp(t)
	b.mu.Lock()
	data := string(b.movedInLocked().bytes())
	b.mu.Unlock()
	snap := b.Snapshot()
	var list, tiles, bar bytes.Buffer
	if err := views.OrdersView(snap.Counters, true).Render(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	for _, c := range views.CounterTiles(snap.Counters) {
		if err := views.TileCount(c.ID, c.N, true).Render(context.Background(), &tiles); err != nil {
			t.Fatal(err)
		}
	}
	if err := views.StepBarView(snap.Steps, true).Render(context.Background(), &bar); err != nil {
		t.Fatal(err)
	}
	html := strings.ReplaceAll(data, "\ndata: ", "\n")
	if !strings.HasPrefix(data, "id: "+b.hub.Epoch()+"-") || !strings.Contains(data, "data: <!--refresh--><!--room-->") {
		t.Fatalf("the frame for a page moved in is\n%s\nwant a refresh of this board's last frame, with the room mark", data)
	}
	for what, want := range map[string]string{"the list": list.String(), "the counters": tiles.String(), "the step bar": bar.String()} {
		if !strings.Contains(html, want) {
			t.Errorf("the frame for a page moved in lacks %s as drawn now:\n%s\nin\n%s", what, want, data)
		}
	}
	for _, want := range []string{"B-0", "B-1", "B-2"} {
		if !strings.Contains(data, `data-order="`+want+`"`) {
			t.Errorf("the list lacks order %s", want)
		}
	}
}

// newBooksBoard is a board on books of its own, in a SQLite file, with the
// held wall as the clock of the board, its hub and the books alike: which
// keys are the newest is then the test's to say.
func newBooksBoard(t *testing.T, wall *heldWall) (*store.DB, *testBoard) {
	t.Helper()
	books, err := store.Open(filepath.Join(t.TempDir(), "books.db"), store.Options{Now: wall.Now, Synchronous: "OFF"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { books.Close() })
	return books, newTestBoard(t, func(c *Config) {
		c.Wall, c.After = wall.Now, wall.After
		c.Hub.SetWall(wall.Now)
		c.Store = books
	}, 10)
}

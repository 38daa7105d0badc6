package board

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/a-h/templ"
	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"

	"paytwice/views"
	"paytwice/web/live"
)

// shownKeys reads the key table: each row as its id, its status class
// and its cells' text but the age (which depends on when it was drawn).
func shownKeys(root *html.Node) []string {
	body := byID(root, "keys-body")
	if body == nil {
		return []string{"no table"}
	}
	var out []string
	for tr := body.FirstChild; tr != nil; tr = tr.NextSibling {
		if tr.Type != html.ElementNode {
			continue
		}
		id, _ := attr(tr, "id")
		class, _ := attr(tr, "class")
		var cells []string
		for td := tr.FirstChild; td != nil; td = td.NextSibling {
			if td.Type == html.ElementNode && td.DataAtom == atom.Td && byTag(td, atom.Time) == nil {
				cells = append(cells, text(td))
			}
		}
		out = append(out, id+" "+class+": "+strings.Join(cells, " | "))
	}
	return out
}

// shownCharges reads the charges table: its rows' ids, newest first.
func shownCharges(root *html.Node) []string {
	body := byID(root, "charges-body")
	if body == nil {
		return []string{"no table"}
	}
	var out []string
	for tr := body.FirstChild; tr != nil; tr = tr.NextSibling {
		if tr.Type == html.ElementNode {
			out = append(out, must(attr(tr, "id")))
		}
	}
	return out
}

func byTag(n *html.Node, a atom.Atom) *html.Node {
	for d := range n.Descendants() {
		if d.DataAtom == a {
			return d
		}
	}
	return nil
}

// TestAFloodChangesTheKeyTableARowAtATime: a caller over its share of
// the board (a script paying in a loop, then retrying its last payments
// over and over) has its key rows and charges counted with no frame of
// their own; the frames that draw them change the pages' key table a row
// at a time, never redraw it whole, and each is a small part of the whole
// table's bytes. At the end the page's key table, charges table and
// orders list, as its frames left them, are what a page drawn now gets.
func TestAFloodChangesTheKeyTableARowAtATime(t *testing.T) {
	wall := newHeldWall()
	_, b := newBooksBoard(t, wall)

	page := newFramePage()
	table := &html.Node{Type: html.ElementNode, Data: "table", DataAtom: atom.Table}
	table.AppendChild(&html.Node{Type: html.ElementNode, Data: "tbody", DataAtom: atom.Tbody, Attr: []html.Attribute{{Key: "id", Val: "keys-body"}}})
	page.root.AppendChild(table)
	charges := &html.Node{Type: html.ElementNode, Data: "table", DataAtom: atom.Table}
	charges.AppendChild(&html.Node{Type: html.ElementNode, Data: "tbody", DataAtom: atom.Tbody, Attr: []html.Attribute{{Key: "id", Val: "charges-body"}}})
	page.root.AppendChild(charges)
	page.root.AppendChild(&html.Node{Type: html.ElementNode, Data: "div", DataAtom: atom.Div, Attr: []html.Attribute{{Key: "id", Val: "orders"}}})
	var (
		mu       sync.Mutex
		flooding bool  // the loop has begun
		retrying bool  // its retries have
		frames   int   // frames since the loop began
		whole    int   // of those, how many redrew the key table whole
		sizes    []int // bytes of each frame since the retries began
		lastID   uint64
	)
	s := b.open(t)
	go func() {
		for {
			id, data, _, err := s.next()
			if err != nil {
				return
			}
			page.apply(t, id, data)
			mu.Lock()
			if flooding {
				frames++
				if strings.Contains(data, `id="keys-body"`) {
					whole++
				}
			}
			if retrying {
				sizes = append(sizes, len(data))
			}
			lastID = id
			mu.Unlock()
		}
	}()
	waitUntil(t, "the page to be open", func() bool { return b.Viewers() == 1 })
	// The page gets the last event's frame: a caller's events over its
	// share are drawn at the end of its interval, which the wall, held,
	// does not reach; flush ends it.
	caughtUpOnPage := func() {
		t.Helper()
		b.caughtUp(t)
		wall.flush()
		last := b.hub.LastSeq()
		waitUntil(t, fmt.Sprintf("the page to get event %d's frame", last), func() bool {
			mu.Lock()
			defer mu.Unlock()
			return lastID >= last
		})
	}

	// A class paying at its pace: every row drawn as it comes.
	for i := range 12 {
		for _, e := range paymentEvents(i) {
			e.Scope = fmt.Sprintf("session:student-%d", i)
			b.hub.Publish(e)
		}
		wall.advance(100 * time.Millisecond)
	}
	caughtUpOnPage()
	mu.Lock()
	flooding = true
	mu.Unlock()

	// A script paying in a loop, fifty payments in one instant: over its
	// burst share after twenty; the rest are counted, not drawn.
	const loop = "token:loop"
	for i := 100; i < 150; i++ {
		for _, e := range paymentEvents(i) {
			e.Scope = loop
			b.hub.Publish(e)
		}
	}
	caughtUpOnPage()
	mu.Lock()
	retrying = true
	mu.Unlock()
	// Then it retries its last three payments, a hundred a second for
	// three seconds of the board's wall: each retry finds its key and
	// counts a hit on its row.
	for i := range 300 {
		k := 147 + i%3
		b.hub.Publish(live.Event{Kind: live.Received, Request: fmt.Sprintf("rq_retry%05d", i), Scope: loop,
			Key: fmt.Sprintf("board-key-%d", k), OrderID: fmt.Sprintf("B-%d", k), Amount: 129900})
		b.hub.Publish(live.Event{Kind: live.Replayed, Status: 201, Request: fmt.Sprintf("rq_retry%05d", i), Scope: loop,
			Key: fmt.Sprintf("board-key-%d", k), OrderID: fmt.Sprintf("B-%d", k), Amount: 129900})
		wall.advance(10 * time.Millisecond)
		if i%25 == 24 {
			caughtUpOnPage()
		}
	}
	// The last retries' frame is held to the caller's pace of the board
	// (shareRefresh) and then drawn by itself. (A page drawn from the
	// model before that would make it redraw the table whole: the model
	// is read once the page has it.)
	b.caughtUp(t)
	wall.flush()
	waitUntil(t, "the page's key table to show every retry", func() bool {
		page.mu.Lock()
		defer page.mu.Unlock()
		got := shownKeys(page.root)
		return len(got) >= 3 && strings.HasSuffix(got[0], "| 100") && strings.HasSuffix(got[1], "| 100") && strings.HasSuffix(got[2], "| 100")
	})
	want := b.Snapshot()

	var drawn bytes.Buffer
	if err := views.KeysBody(want.Keys, want.Now, false).Render(context.Background(), &drawn); err != nil {
		t.Fatal(err)
	}
	wholeBytes := drawn.Len()
	nodes, err := html.ParseFragment(&drawn, &html.Node{Type: html.ElementNode, Data: "table", DataAtom: atom.Table})
	if err != nil {
		t.Fatal(err)
	}
	holder := &html.Node{Type: html.ElementNode, Data: "table", DataAtom: atom.Table}
	for _, n := range nodes {
		holder.AppendChild(n)
	}
	wantRows := shownKeys(holder)
	page.mu.Lock()
	gotRows := shownKeys(page.root)
	page.mu.Unlock()
	if strings.Join(gotRows, "\n") != strings.Join(wantRows, "\n") {
		t.Errorf("the page's key table, as its frames left it:\n%s\nwant, as a page drawn now:\n%s", strings.Join(gotRows, "\n"), strings.Join(wantRows, "\n"))
	}
	if len(wantRows) != liveKeys || want.Keys[0].Hits != 100 {
		t.Errorf("a page drawn now shows %d key rows, the newest with %d hits: want %d rows and 100 hits (is the loop counted?)", len(wantRows), want.Keys[0].Hits, liveKeys)
	}

	mu.Lock()
	retrying = false
	mu.Unlock()
	// Its last two payments, in the same instant as its last retries: held,
	// then drawn by a refresh frame that inserts their key rows and
	// orders. The page reconnects with the id of the last frame it took,
	// which the refresh shares: it gets the refresh again and takes it, as
	// pay.js does, and still shows each row and order once.
	for i := 150; i < 152; i++ {
		for _, e := range paymentEvents(i) {
			e.Scope = loop
			b.hub.Publish(e)
		}
	}
	b.caughtUp(t)
	wall.flush()
	newest := keyDOMID(loop, "board-key-151")
	waitUntil(t, "the page to show the loop's last payments", func() bool {
		page.mu.Lock()
		defer page.mu.Unlock()
		got := shownKeys(page.root)
		return len(got) > 0 && strings.HasPrefix(got[0], newest+" key-done")
	})
	mu.Lock()
	took := lastID
	mu.Unlock()
	again := b.open(t, "Last-Event-ID", live.EventID(b.hub.Epoch(), took))
	for {
		id, data, _, err := again.next()
		if err != nil {
			t.Fatalf("the reconnected page's stream: %v", err)
		}
		if data == "" {
			continue // a heartbeat
		}
		if !strings.Contains(data, "<!--refresh-->") || id != took {
			t.Fatalf("the page resumed from %d got frame %d, want the refresh it had: %.300s", took, id, data)
		}
		page.apply(t, id, data)
		break
	}
	again.close()
	want = b.Snapshot()
	page.mu.Lock()
	keysNow, ordersNow, chargesNow := shownKeys(page.root), shownOrders(page.root), shownCharges(page.root)
	page.mu.Unlock()
	var wantCharges []string
	for _, c := range want.Charges {
		wantCharges = append(wantCharges, c.ID)
	}
	for _, c := range []struct {
		what      string
		got, want []string
	}{
		{"key table", keysNow, rowsOf(t, views.KeysBody(want.Keys, want.Now, false), atom.Table, shownKeys)},
		{"orders list", ordersNow, rowsOf(t, views.OrdersView(want.Counters, false), atom.Body, shownOrders)},
		{"charges table", chargesNow, wantCharges},
	} {
		if strings.Join(c.got, "\n") != strings.Join(c.want, "\n") {
			t.Errorf("the page's %s after it took the refresh again:\n%s\nwant, as a page drawn now:\n%s", c.what, strings.Join(c.got, "\n"), strings.Join(c.want, "\n"))
		}
	}

	mu.Lock()
	defer mu.Unlock()
	largest := 0
	for _, n := range sizes {
		largest = max(largest, n)
	}
	t.Logf("the whole key table: %d bytes; %d frames during the loop, %d during its retries, the largest of those %d bytes", wholeBytes, frames, len(sizes), largest)
	if whole > 0 {
		t.Errorf("%d of the %d frames during the loop redrew the key table whole", whole, frames)
	}
	if len(sizes) < 2 {
		t.Errorf("only %d frames during the retries: they were not drawn at the caller's pace", len(sizes))
	}
	// (A wake may send two frames as one; the rows they both redraw are
	// sent once.)
	if largest*2 > wholeBytes {
		t.Errorf("a frame during the retries took %d bytes, over half the whole key table's %d", largest, wholeBytes)
	}
}

// rowsOf renders c, parsed as within an element of kind in, and reads it
// with read.
func rowsOf(t *testing.T, c templ.Component, in atom.Atom, read func(*html.Node) []string) []string {
	t.Helper()
	var buf bytes.Buffer
	if err := c.Render(context.Background(), &buf); err != nil {
		t.Fatal(err)
	}
	nodes, err := html.ParseFragment(&buf, &html.Node{Type: html.ElementNode, Data: in.String(), DataAtom: in})
	if err != nil {
		t.Fatal(err)
	}
	holder := &html.Node{Type: html.ElementNode, Data: in.String(), DataAtom: in}
	for _, n := range nodes {
		holder.AppendChild(n)
	}
	return read(holder)
}

// keyFragments finds a frame's changes to the key table: the rows it
// inserts, redraws or deletes, and the table drawn whole.
var keyFragments = regexp.MustCompile(`<template><tbody hx-swap-oob="afterbegin:#keys-body">.*?</tbody></template>|<template><tr id="k-[^"]*"[^>]*hx-swap-oob="true">.*?</tr></template>|<div id="k-[^"]*" hx-swap-oob="delete"></div>|<tbody id="keys-body".*?</tbody>`)

// TestAFloodThatTurnsTheKeyTableOverCostsItsRows: one caller paying thirty
// new keys per frame of its share and retrying ten more (every row of the
// table new or changed between two of its frames) has each frame change
// the pages' key table row by row, never redraw it whole: a frame's bytes
// for the key table are those of the rows that changed and the ids of
// the rows that left. At the end the page shows what a page drawn now
// does.
func TestAFloodThatTurnsTheKeyTableOverCostsItsRows(t *testing.T) {
	wall := newHeldWall()
	_, b := newBooksBoard(t, wall)

	page := newFramePage()
	table := &html.Node{Type: html.ElementNode, Data: "table", DataAtom: atom.Table}
	table.AppendChild(&html.Node{Type: html.ElementNode, Data: "tbody", DataAtom: atom.Tbody, Attr: []html.Attribute{{Key: "id", Val: "keys-body"}}})
	page.root.AppendChild(table)
	type counted struct{ bytes, fragments, rows, deletes, whole int }
	var (
		mu       sync.Mutex
		flooding bool
		frames   []counted
		lastID   uint64
		busy     bool // a frame drew busy mode's row
	)
	s := b.open(t)
	go func() {
		for {
			id, data, _, err := s.next()
			if err != nil {
				return
			}
			page.apply(t, id, data)
			mu.Lock()
			busy = busy || strings.Contains(data, `id="`+busyRowPrefix)
			if flooding {
				var c counted
				for _, f := range keyFragments.FindAllString(data, -1) {
					c.bytes += len(f)
					c.fragments++
					c.rows += strings.Count(f, `<tr id="k-`)
					c.deletes += strings.Count(f, `hx-swap-oob="delete"`)
					if strings.HasPrefix(f, `<tbody id="keys-body"`) {
						c.whole++
					}
				}
				if c.bytes > 0 {
					frames = append(frames, c)
				}
			}
			lastID = id
			mu.Unlock()
		}
	}()
	waitUntil(t, "the page to be open", func() bool { return b.Viewers() == 1 })
	// The page gets the last event's frame: a caller's events over its
	// share are drawn at the end of its interval, which the wall, held,
	// does not reach; flush ends it.
	caughtUpOnPage := func() {
		t.Helper()
		b.caughtUp(t)
		wall.flush()
		last := b.hub.LastSeq()
		waitUntil(t, fmt.Sprintf("the page to get event %d's frame", last), func() bool {
			mu.Lock()
			defer mu.Unlock()
			return lastID >= last
		})
	}

	// A table of the class's keys to start from, every row drawn. Each
	// student's events are applied before the wall moves on: busy mode
	// counts an event when the board applies it, so a backlog applied
	// after the wall had moved would count the class's 240 events in one
	// instant and, with the flood's share, put the board in busy mode.
	for i := range liveKeys {
		for _, e := range paymentEvents(i) {
			e.Scope = fmt.Sprintf("session:student-%d", i)
			b.hub.Publish(e)
		}
		b.caughtUp(t)
		wall.advance(100 * time.Millisecond)
	}
	caughtUpOnPage()
	mu.Lock()
	flooding = true
	mu.Unlock()

	const loop = "token:loop"
	const fresh, retried = 30, liveKeys - 30
	next := 1000
	for round := range 6 {
		// The ten newest keys of the round before (or of the class) stay
		// in the table below the thirty new: a retry on each counts a hit.
		for i := range retried {
			k := next - retried + i
			scope := loop
			if round == 0 {
				k, scope = liveKeys-retried+i, fmt.Sprintf("session:student-%d", liveKeys-retried+i)
			}
			rq := fmt.Sprintf("rq_retry%d-%d", round, i)
			b.hub.Publish(live.Event{Kind: live.Received, Request: rq, Scope: scope, Key: fmt.Sprintf("board-key-%d", k), OrderID: fmt.Sprintf("B-%d", k), Amount: 129900})
			b.hub.Publish(live.Event{Kind: live.Replayed, Status: 201, Request: rq, Scope: scope, Key: fmt.Sprintf("board-key-%d", k), OrderID: fmt.Sprintf("B-%d", k), Amount: 129900})
		}
		for range fresh {
			for _, e := range paymentEvents(next) {
				e.Scope = loop
				b.hub.Publish(e)
			}
			next++
		}
		wall.advance(shareRefresh)
		caughtUpOnPage()
	}
	newest := keyDOMID(loop, fmt.Sprintf("board-key-%d", next-1))
	waitUntil(t, "the page to show the loop's last key", func() bool {
		page.mu.Lock()
		defer page.mu.Unlock()
		got := shownKeys(page.root)
		return len(got) > 0 && strings.HasPrefix(got[0], newest+" ")
	})
	want := b.Snapshot()
	wantRows := rowsOf(t, views.KeysBody(want.Keys, want.Now, false), atom.Table, shownKeys)
	waitUntil(t, "the page's key table to be a page drawn now's", func() bool {
		page.mu.Lock()
		defer page.mu.Unlock()
		return strings.Join(shownKeys(page.root), "\n") == strings.Join(wantRows, "\n")
	})

	// The bytes of one row at most, of a deleted row's id, and of what
	// wraps a fragment.
	rowBytes := 0
	for _, k := range want.Keys {
		var buf bytes.Buffer
		if err := views.KeyRowView(k, want.Now, true).Render(context.Background(), &buf); err != nil {
			t.Fatal(err)
		}
		rowBytes = max(rowBytes, buf.Len()+len(`<template></template>`))
	}
	const deleteBytes = len(`<div id="k-" hx-swap-oob="delete"></div>`) + 20
	const wrapBytes = len(`<template><tbody hx-swap-oob="afterbegin:#keys-body"></tbody></template>`)
	mu.Lock()
	defer mu.Unlock()
	// Busy mode, which one caller over its share must not bring about
	// (shares.go), would end by drawing the table whole from the books,
	// which hold none of these keys.
	if busy {
		t.Fatal("the board went busy during the test")
	}
	if len(frames) < 6 {
		t.Fatalf("only %d frames changed the key table during the flood", len(frames))
	}
	for i, c := range frames {
		// (A wake may send several frames as one event.)
		budget := c.rows*rowBytes + c.deletes*deleteBytes + c.fragments*wrapBytes
		t.Logf("event %d: %d bytes of the key table, %d rows drawn, %d deleted (budget %d)", i, c.bytes, c.rows, c.deletes, budget)
		if c.whole > 0 {
			t.Errorf("event %d redrew the key table whole", i)
		}
		if c.bytes > budget {
			t.Errorf("event %d: %d bytes of the key table for %d rows and %d deletions, over %d", i, c.bytes, c.rows, c.deletes, budget)
		}
	}
}

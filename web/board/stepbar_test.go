package board

import (
	"fmt"
	"strings"
	"testing"

	"github.com/a-h/templ"

	"paytwice/views"
)

// heldRows are n held rows, oldest first.
func heldRows(n int) []views.HeldRow {
	out := make([]views.HeldRow, n)
	for i := range out {
		id := fmt.Sprintf("rq_%08d", i)
		out[i] = views.HeldRow{Request: id, RowID: "tl-" + id, Checkpoint: "received", OrderID: fmt.Sprintf("A-%d", i), Who: "you on s1",
			Click: "click 1", CanLose: true, CanCrash: true}
	}
	return out
}

// A held event redraws the rows it changed, not the bar: what it costs
// every viewer stays the same whether 10 or 500 requests are held.
func TestStepBarRedrawsOnlyWhatChanged(t *testing.T) {
	changes := func(prev, next []views.HeldRow) ([]templ.Component, string) {
		ops := stepBarChanges(views.StepBar{On: true, Held: prev}, views.StepBar{On: true, Held: next})
		return ops, string(renderFrame(ops...))
	}
	bytesFor := map[int][3]int{}
	for _, n := range []int{10, 500} {
		rows := heldRows(n + 1)
		// One more request held: only its row is sent, at the end.
		ops, html := changes(rows[:n], rows)
		if len(ops) != 1 || !strings.Contains(html, `hx-swap-oob="beforeend:#step-held"`) || strings.Count(html, "<li ") != 1 || !strings.Contains(html, rows[n].Request) {
			t.Fatalf("%d held, one more: %s", n, html)
		}
		added := len(html)
		// The oldest goes on: its row is deleted.
		ops, html = changes(rows, rows[1:])
		if len(ops) != 1 || !strings.Contains(html, `id="held-`+rows[0].Request+`" hx-swap-oob="delete"`) {
			t.Fatalf("%d held, the oldest goes on: %s", n, html)
		}
		gone := len(html)
		// One row's answer changes: that row is redrawn in place.
		next := append([]views.HeldRow(nil), rows...)
		next[n/2].Checkpoint, next[n/2].Answer = "answered", "201"
		ops, html = changes(rows, next)
		if len(ops) != 1 || strings.Count(html, "<li ") != 1 || !strings.Contains(html, `id="held-`+next[n/2].Request+`"`) || !strings.Contains(html, `hx-swap-oob="true"`) {
			t.Fatalf("%d held, one answers: %s", n, html)
		}
		bytesFor[n] = [3]int{added, gone, len(html)}
	}
	t.Logf("bytes sent for a row added, gone, changed: %v with 10 held, %v with 500", bytesFor[10], bytesFor[500])
	for i, what := range []string{"a row added", "a row gone", "a row changed"} {
		small, large := bytesFor[10][i], bytesFor[500][i]
		if large > small+16 || large > 2048 {
			t.Errorf("%s: %d bytes with 10 held, %d with 500: it grows with the held requests", what, small, large)
		}
	}

	rows := heldRows(3)
	// The first request held: the head enables its buttons, the row is added.
	if ops, html := changes(nil, rows[:1]); len(ops) != 2 || !strings.Contains(html, `id="step-head"`) || strings.Count(html, "<li ") != 1 {
		t.Fatalf("the first held: %s", html)
	}
	// Play: the list is drawn empty rather than deleted row by row.
	if ops, html := changes(rows, nil); len(ops) != 2 || !strings.Contains(html, `id="step-head"`) || !strings.Contains(html, `<ol id="step-held" class="held" hx-swap-oob="true"></ol>`) {
		t.Fatalf("Play: %s", html)
	}
	// Another server's request held earlier than the last row shown: it
	// cannot be appended, the list is drawn again in order.
	if ops, html := changes([]views.HeldRow{rows[0], rows[2]}, rows); len(ops) != 1 || !strings.Contains(html, `<ol id="step-held" class="held" hx-swap-oob="true">`) || strings.Count(html, "<li ") != 3 {
		t.Fatalf("a row in the middle: %s", html)
	}
	// Step mode turned off: the whole bar.
	if ops := stepBarChanges(views.StepBar{On: true, Held: rows}, views.StepBar{}); len(ops) != 1 || !strings.Contains(string(renderFrame(ops...)), `id="step-bar"`) {
		t.Fatalf("turned off: %s", renderFrame(ops...))
	}
	// Nothing changed: nothing is sent.
	if ops, _ := changes(rows, rows); len(ops) != 0 {
		t.Fatalf("no change drew %d fragments", len(ops))
	}
}

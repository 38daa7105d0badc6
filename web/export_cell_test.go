package web

import (
	"bytes"
	"encoding/csv"
	"net/http"
	"strings"
	"testing"
)

func TestCSVCellsNeverStartAFormula(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"A-1001", "A-1001"},
		{"", ""},
		{"=1+1", "'=1+1"},
		{"+1", "'+1"},
		{"-1", "'-1"},
		{"@SUM(A1)", "'@SUM(A1)"},
		{"\t=1", "'\t'=1"},
		{"\r=1", "'\r=1"},
		{"A;=HYPERLINK(1)", "A;'=HYPERLINK(1)"},
		{"A,=1", "A,'=1"},
		{"A\t=1", "A\t'=1"},
		{`A; "=1"`, `A;' "=1"`},
		{"a;b;c", "a;b;c"},
		{"order;-5", "order;'-5"},
		{"x=1;y", "x=1;y"},
	} {
		if got := cell(c.in); got != c.want {
			t.Errorf("cell(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// Whatever delimiter a spreadsheet guesses (",", ";" or tab), no cell of
// the export starts with a formula character, even when a key or an order
// id carries ";=…" inside it.
func TestTimelineCSVIsSafeUnderEveryDelimiter(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, Config{})
	for _, key := range []string{"k;=HYPERLINK(\"http://x\")", "k\t+1", "-2", "k,@SUM(1)"} {
		env.pay(key, `{"order_id":"A;=1+1","amount_satang":100}`)
	}
	r := env.get("/api/timeline.csv")
	if r.Status != http.StatusOK {
		t.Fatalf("%d", r.Status)
	}
	if _, err := csv.NewReader(bytes.NewReader(r.Body)).ReadAll(); err != nil {
		t.Fatalf("not valid CSV: %v", err)
	}
	for _, delim := range []string{",", ";", "\t"} {
		for n, line := range strings.Split(string(r.Body), "\n") {
			for _, piece := range strings.Split(line, delim) {
				if startsFormula(piece) {
					t.Fatalf("split at %q, line %d has a cell %q that a spreadsheet would run", delim, n+1, piece)
				}
			}
		}
	}
}

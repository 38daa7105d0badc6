package web

import (
	"bytes"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestWorkshopPlanInTheDocs: the README leads to the workshop's
// 90-minute plan (docs/workshop.md), whose table runs from minute 0 to
// minute 90 with no gap, says what to hand out and when the reference
// servers come, and whose line counts of the two reference servers are
// the files' own.
func TestWorkshopPlanInTheDocs(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`\]\(docs/workshop\.md\)[^\n]*90-minute plan`).Match(readme) {
		t.Error("the README does not lead to the workshop's 90-minute plan in docs/workshop.md")
	}
	doc, err := os.ReadFile("../docs/workshop.md")
	if err != nil {
		t.Fatal(err)
	}
	_, plan, ok := strings.Cut(string(doc), "\n## A 90-minute plan\n")
	if !ok {
		t.Fatal("docs/workshop.md has no section \"A 90-minute plan\"")
	}
	plan, _, _ = strings.Cut(plan, "\n## ")
	for _, says := range []string{"**Hand out**", "reference servers", "| minutes | the room | the board shows |"} {
		if !strings.Contains(plan, says) {
			t.Errorf("the plan does not say %q", says)
		}
	}
	at := 0
	for _, m := range regexp.MustCompile(`(?m)^\| (\d+)–(\d+) \|`).FindAllStringSubmatch(plan, -1) {
		from, _ := strconv.Atoi(m[1])
		to, _ := strconv.Atoi(m[2])
		if from != at || to <= from {
			t.Errorf("the plan's row %s–%s follows minute %d", m[1], m[2], at)
		}
		at = to
	}
	if at != 90 {
		t.Errorf("the plan's table ends at minute %d, not 90", at)
	}
	for _, server := range []struct{ lang, file string }{{"Python", "server.py"}, {"Go", "server.go"}} {
		src, err := os.ReadFile("../docs/workshop/" + server.file)
		if err != nil {
			t.Fatal(err)
		}
		lines := bytes.Count(src, []byte("\n"))
		if !regexp.MustCompile(fmt.Sprintf(`\b%d (lines )?of\s+%s\b`, lines, server.lang)).Match(doc) {
			t.Errorf("docs/workshop.md does not say the %s reference server's %d lines", server.lang, lines)
		}
	}
}

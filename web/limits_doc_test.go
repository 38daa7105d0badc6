package web

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// Running a class safely is written down: the README leads to it, its
// section states the threat model, what the room promises and what a
// student sees when refused, and its table names every limit -limits
// takes with the default the server really has (read back through
// ParseLimits), so that a limit added or changed is documented and
// settable by the name the table gives.
func TestEveryLimitIsDocumentedWithItsDefault(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "(docs/classroom.md#running-a-class-safely)") {
		t.Error("the README does not lead to docs/classroom.md#running-a-class-safely")
	}
	raw, err := os.ReadFile("../docs/classroom.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	start := strings.Index(doc, "\n## Running a class safely\n")
	if start < 0 {
		t.Fatal(`docs/classroom.md has no section "Running a class safely"`)
	}
	section := doc[start+1:]
	if end := strings.Index(section[3:], "\n## "); end >= 0 {
		section = section[:end+3]
	}
	for _, part := range []string{"**The threat model:**", "### What the room promises", "### The limits", "### What a student sees when refused"} {
		if !strings.Contains(section, part) {
			t.Errorf("the section Running a class safely has no %q", part)
		}
	}
	row := regexp.MustCompile("(?m)^\\| `([a-z-]+)` \\| `?([^`|]+?)`? \\|")
	documented := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		documented[m[1]] = strings.TrimSpace(m[2])
	}
	for _, ls := range limitSettings {
		value, ok := documented[ls.name]
		if !ok {
			t.Errorf("the table of limits has no row for %s", ls.name)
			continue
		}
		got, err := ParseLimits(ls.name + "=" + strings.ReplaceAll(value, ",", ""))
		if err != nil {
			t.Errorf("%s: the documented default %q is not a value -limits takes: %v", ls.name, value, err)
			continue
		}
		if got != DefaultLimits {
			t.Errorf("%s: the documented default %q is not the server's (%s)", ls.name, value, defaultOf(ls))
		}
	}
}

// defaultOf is ls's default as -h shows it.
func defaultOf(ls limitSetting) string {
	l := DefaultLimits
	switch {
	case ls.count != nil:
		return strconv.Itoa(*ls.count(&l))
	case ls.rate != nil:
		return ls.rate(&l).String()
	default:
		return ls.dur(&l).String()
	}
}

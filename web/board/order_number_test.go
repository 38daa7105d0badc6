package board

import (
	"slices"
	"testing"
)

func TestOrderNumbersSortAsPeopleReadThem(t *testing.T) {
	got := []string{"A-1000", "B-2", "A-999", "A-10", "A-9", "A-007", "A-7", "A-1001", "A", "A-", "Z-0001", "a-1", "A-1000x", "A-1000-2", "A-1000-10"}
	slices.SortFunc(got, func(a, b string) int {
		switch {
		case orderNumberLess(a, b):
			return -1
		case orderNumberLess(b, a):
			return 1
		}
		return 0
	})
	want := []string{"A", "A-", "A-007", "A-7", "A-9", "A-10", "A-999", "A-1000", "A-1000-2", "A-1000-10", "A-1000x", "A-1001", "B-2", "Z-0001", "a-1"}
	if !slices.Equal(got, want) {
		t.Fatalf("sorted as\n%q\nwant\n%q", got, want)
	}
}

func FuzzOrderNumberLessIsAStrictOrder(f *testing.F) {
	f.Add("A-999", "A-1000", "A-07")
	f.Add("", "0", "00")
	f.Fuzz(func(t *testing.T, a, b, c string) {
		if orderNumberLess(a, a) {
			t.Fatalf("%q < itself", a)
		}
		if orderNumberLess(a, b) && orderNumberLess(b, a) {
			t.Fatalf("%q and %q each less than the other", a, b)
		}
		if a != b && !orderNumberLess(a, b) && !orderNumberLess(b, a) {
			t.Fatalf("%q and %q are distinct yet neither is less", a, b)
		}
		if orderNumberLess(a, b) && orderNumberLess(b, c) && !orderNumberLess(a, c) {
			t.Fatalf("%q < %q < %q but not %q < %q", a, b, c, a, c)
		}
	})
}

package web

import (
	"cmp"
	"strings"
)

// orderNumberLess orders order numbers as people read them on the board:
// a run of digits compares by its value, so A-999 comes before A-1000,
// as the list of a class whose orders the API numbered from 1 should
// read. Numbers of equal value fall back on their text, so
// the order stays total.
func orderNumberLess(a, b string) bool {
	if c := compareNatural(a, b); c != 0 {
		return c < 0
	}
	return a < b
}

// compareNatural compares a and b byte by byte, but each run of digits
// as one number.
func compareNatural(a, b string) int {
	for a != "" && b != "" {
		da, db := leadingDigits(a), leadingDigits(b)
		if da > 0 && db > 0 {
			na, nb := strings.TrimLeft(a[:da], "0"), strings.TrimLeft(b[:db], "0")
			if c := cmp.Compare(len(na), len(nb)); c != 0 {
				return c
			}
			if c := strings.Compare(na, nb); c != 0 {
				return c
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			return cmp.Compare(a[0], b[0])
		}
		a, b = a[1:], b[1:]
	}
	return cmp.Compare(len(a), len(b))
}

// leadingDigits is the length of the run of ASCII digits s starts with.
func leadingDigits(s string) int {
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	return n
}

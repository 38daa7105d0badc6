package board

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// What a student sends ends up on the projector: the board shows it short
// and plain. templ escapes every string it writes into HTML; these keep
// the text itself small and printable, so that nobody's order id or
// reason can crowd the others off the screen or draw what is not there.
const (
	// shownOrderID is how many characters of an order id the board shows
	// (the API allows pay.MaxOrderIDLen); the tables and the API keep it
	// whole.
	shownOrderID = 20
	// shownReason is how many characters of a page's reason for an
	// answer that never arrived the board shows.
	shownReason = 48
)

// plain is s with every character that is not printable replaced by '?',
// cut to n characters with an ellipsis.
func plain(s string, n int) string {
	ok := utf8.ValidString(s) && utf8.RuneCountInString(s) <= n
	for _, r := range s {
		if !ok || !unicode.IsPrint(r) {
			ok = false
			break
		}
	}
	if ok {
		return s // the common case: no copy
	}
	var b strings.Builder
	count := 0
	for _, r := range s {
		if count == n-1 && utf8.RuneCountInString(s) > n {
			b.WriteRune('…')
			break
		}
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			r = '?'
		}
		b.WriteRune(r)
		count++
	}
	return b.String()
}

// Plain is plain for the other tables of the board (the workshop's): s
// with every character that is not printable, bidi and other formatting
// controls among them, replaced by '?', cut to n characters.
func Plain(s string, n int) string { return plain(s, n) }

func shortOrderID(s string) string { return plain(s, shownOrderID) }

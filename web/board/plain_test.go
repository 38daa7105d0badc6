package board

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestPlainKeepsWhatStudentsSendShortAndPrintable(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"A-1001", "A-1001"},
		{strings.Repeat("X", 64), strings.Repeat("X", 19) + "…"},
		{"bell\a and\u202eevil", "bell? and?evil"},
		{"\xff\xfe", "??"},
		{"<script>alert(1)</script>", "<script>alert(1)</s…"},
	} {
		got := plain(tc.in, shownOrderID)
		if got != tc.want {
			t.Errorf("plain(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if utf8.RuneCountInString(got) > shownOrderID {
			t.Errorf("plain(%q) is %d characters long", tc.in, utf8.RuneCountInString(got))
		}
	}
}

func FuzzPlain(f *testing.F) {
	for _, s := range []string{"A-1", strings.Repeat("é", 30), "\x00\x01", "\u202e"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := plain(s, shownReason)
		if !utf8.ValidString(got) || utf8.RuneCountInString(got) > shownReason {
			t.Fatalf("plain(%q) = %q", s, got)
		}
		for _, r := range got {
			if r != '…' && (r < ' ' || r == 0x7f || r == '\u202e') {
				t.Fatalf("plain(%q) kept %U", s, r)
			}
		}
	})
}

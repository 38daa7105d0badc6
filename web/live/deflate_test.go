package live

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestDeflatePiecesMakeOneStream: pieces compressed apart, sent in any
// order after one header, read as one gzip body, each piece readable as
// soon as it has arrived.
func TestDeflatePiecesMakeOneStream(t *testing.T) {
	var pieces [][]byte
	for i := range 5 {
		pieces = append(pieces, []byte(strings.Repeat(fmt.Sprintf("data: <li id=%q>frame</li>\n", fmt.Sprint("row-", i)), 50+i)+"\n"))
	}
	for _, order := range [][]int{{0, 1, 2, 3, 4}, {3, 1, 4, 0, 2}} {
		pr, pw := io.Pipe()
		go func() {
			_, _ = pw.Write(GzipHeader)
			for _, i := range order {
				_, _ = pw.Write(Deflate(pieces[i]))
			}
			// no trailer, as a stream that its connection's close ends
		}()
		zr, err := gzip.NewReader(pr)
		if err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(zr)
		for _, i := range order {
			// The pipe never closes: a read that needed bytes of a later
			// piece would hang.
			got := make([]byte, len(pieces[i]))
			if _, err := io.ReadFull(r, got); err != nil {
				t.Fatalf("order %v, piece %d: %v", order, i, err)
			}
			if !bytes.Equal(got, pieces[i]) {
				t.Fatalf("order %v, piece %d: read %q", order, i, got)
			}
		}
		pw.Close()
	}
}

func TestAcceptsGzip(t *testing.T) {
	for header, want := range map[string]bool{
		"":                        false,
		"identity":                false,
		"gzip":                    true,
		"gzip, deflate, br, zstd": true,
		"br;q=1.0, GZIP;q=0.5":    true,
		"gzip;q=0":                false,
		"gzip; q=0.000":           false,
		"gzip;Q=0":                false,
		"gzip;q=0.001":            true,
		"gzip;q=1.000":            true,
		"deflate, gzip;q=bad":     false,
		"gzip;q=1.5":              false,
		"gzip;q=0.0001":           false,
		"gzip;q=.5":               false,
		"gzip;q=1e0":              false,
		"gzip;q=":                 false,
		// x-gzip is gzip by another name (RFC 9110, 8.4.1.3).
		"x-gzip":                    true,
		"X-GZIP;q=0.5":              true,
		"x-gzip;q=0":                false,
		"x-gzip;q=0, *":             false,
		"x-gzip, gzip;q=0":          true,
		"gzip;q=0, x-gzip":          false,
		"x-gzip;q=0, gzip":          false,
		"xgzip":                     false,
		"x-gzip2, x-gzi":            false,
		"br, deflate ,  gzip ;q=1 ": true,
		// Parameters beside the weight do not hide it.
		"gzip;level=9;q=0":  false,
		"gzip;level=9":      true,
		"gzip; x=1 ; q=0.2": true,
		// The wildcard stands for every coding not named.
		"*":                   true,
		"*;q=0":               false,
		"identity, *;q=0.1":   true,
		"*, gzip;q=0":         false,
		"gzip;q=0, *":         false,
		"*;q=0, gzip":         true,
		"br, *;q=0":           false,
		"gzip;q=0.5, *;q=0":   true,
		"gzip, gzip;q=0":      true,
		"gzip;q=0,gzip;q=1.0": false,
	} {
		r, _ := http.NewRequest(http.MethodGet, "/events", nil)
		if header != "" {
			r.Header.Set("Accept-Encoding", header)
		}
		if got := AcceptsGzip(r); got != want {
			t.Errorf("Accept-Encoding %q: %v, want %v", header, got, want)
		}
	}
	t.Run("over several header lines, as one list", func(t *testing.T) {
		r, _ := http.NewRequest(http.MethodGet, "/events", nil)
		r.Header.Add("Accept-Encoding", "br")
		r.Header.Add("Accept-Encoding", "gzip;q=0")
		r.Header.Add("Accept-Encoding", "*")
		if AcceptsGzip(r) {
			t.Error("gzip;q=0 on a second line was not read as a refusal")
		}
	})
}

// FuzzAcceptsGzip: whatever the header, AcceptsGzip answers (no panic),
// the case of the names and the blanks around the separators do not
// change its answer, gzip named first decides it, and a header that
// names neither gzip nor the wildcard never gets gzip.
func FuzzAcceptsGzip(f *testing.F) {
	for _, seed := range []string{"", "gzip", "gzip;q=0", "*", "*;q=0, gzip", "br;q=1.0, gzip;q=0.8",
		"gzip;level=9;q=0", "gzip;q=0.001", "gzip;q=", ";;,,;q=1", "identity;q=0, *;q=0.5",
		"x-gzip", "x-gzip;q=0, gzip", "X-Gzip;q=0.5, *;q=0"} {
		f.Add(seed)
	}
	accepts := func(header string) bool {
		r := &http.Request{Header: http.Header{"Accept-Encoding": {header}}}
		return AcceptsGzip(r)
	}
	asciiUpper := func(s string) string {
		return strings.Map(func(r rune) rune {
			if 'a' <= r && r <= 'z' {
				return r - 'a' + 'A'
			}
			return r
		}, s)
	}
	spaced := strings.NewReplacer(",", " ,\t", ";", "\t; ")
	f.Fuzz(func(t *testing.T, header string) {
		got := accepts(header)
		if up := asciiUpper(header); accepts(up) != got {
			t.Errorf("%q: %v, but %q: %v", header, got, up, !got)
		}
		if sp := spaced.Replace(header); accepts(sp) != got {
			t.Errorf("%q: %v, but with blanks around the separators %q: %v", header, got, sp, !got)
		}
		if !accepts("gzip, " + header) {
			t.Errorf("gzip, %s: gzip named first with no weight was refused", header)
		}
		if accepts("gzip;q=0, " + header) {
			t.Errorf("gzip;q=0, %s: gzip named first with a weight of 0 was taken", header)
		}
		if lower := strings.ToLower(header); got && !strings.Contains(lower, "gzip") && !strings.Contains(lower, "*") {
			t.Errorf("%q names neither gzip nor *, yet gets gzip", header)
		}
	})
}

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
		"":                          false,
		"identity":                  false,
		"gzip":                      true,
		"gzip, deflate, br, zstd":   true,
		"br;q=1.0, GZIP;q=0.5":      true,
		"gzip;q=0":                  false,
		"gzip; q=0.000":             false,
		"deflate, gzip;q=bad":       false,
		"x-gzip":                    false,
		"br, deflate ,  gzip ;q=1 ": true,
	} {
		r, _ := http.NewRequest(http.MethodGet, "/events", nil)
		if header != "" {
			r.Header.Set("Accept-Encoding", header)
		}
		if got := AcceptsGzip(r); got != want {
			t.Errorf("Accept-Encoding %q: %v, want %v", header, got, want)
		}
	}
}

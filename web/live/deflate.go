package live

import (
	"bytes"
	"compress/flate"
	"net/http"
	"strings"
	"sync"
)

// An event stream compressed for each page alone would cost every page a
// compressor's work per frame, and a compressor's state (hundreds of KB)
// for as long as it stays open. Instead each frame is compressed once, as
// deflate blocks that refer to nothing before them and end on a byte
// boundary (a sync flush): any run of such blocks, after one gzip header,
// is a gzip body a browser inflates as it arrives, so the bytes one frame
// compresses to are shared by every page that gets the frame, whatever
// it got before. The member is never finished (no final block, no
// trailer): an event stream ends when its connection closes.

// GzipHeader starts a gzip-encoded event stream (RFC 1952: deflate, no
// name, no time, unknown system).
var GzipHeader = []byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255}

// deflaters keeps compressors between frames. They compress at
// BestSpeed: at the default level every Deflate cleared the compressor's
// hash tables (640 KB) on Reset and searched its matches harder, and with
// 500 pages open that was about 6% of the server's CPU, for bytes a page's
// write costs next to nothing more for (its cost is the call).
var deflaters = sync.Pool{New: func() any {
	w, _ := flate.NewWriter(nil, flate.BestSpeed)
	return w
}}

// Deflate returns b as deflate blocks that start afresh and end on a
// byte boundary, neither of them final: a piece of an event stream's
// gzip body that may follow any other such piece.
func Deflate(b []byte) []byte {
	var out bytes.Buffer
	out.Grow(len(b)/4 + 64)
	w := deflaters.Get().(*flate.Writer)
	w.Reset(&out)
	_, _ = w.Write(b) // a bytes.Buffer takes everything
	_ = w.Flush()
	deflaters.Put(w)
	return out.Bytes()
}

// AcceptsGzip says whether r's Accept-Encoding takes gzip (RFC 9110,
// 12.5.3): gzip named with a weight above 0, or, gzip not named, the
// wildcard "*" with a weight above 0. "gzip;q=0" refuses it whatever the
// wildcard says; a coding named twice counts as first named. "x-gzip" is
// gzip by another name (RFC 9110, 8.4.1.3), so it counts as a naming of
// gzip: whichever of the two comes first decides. Every browser's
// EventSource names gzip.
func AcceptsGzip(r *http.Request) bool {
	gz, star := unnamed, unnamed
	for _, v := range r.Header.Values("Accept-Encoding") {
		for part := range strings.SplitSeq(v, ",") {
			name, params, _ := strings.Cut(part, ";")
			w := weightOf(params)
			switch name = strings.TrimSpace(name); {
			case isGzip(name) && gz == unnamed:
				gz = w
			case name == "*" && star == unnamed:
				star = w
			}
		}
	}
	if gz != unnamed {
		return gz == wanted
	}
	return star == wanted
}

// isGzip says whether a coding's name is gzip's: "gzip", or "x-gzip",
// which a recipient must read as gzip (RFC 9110, 8.4.1.3).
func isGzip(name string) bool {
	return strings.EqualFold(name, "gzip") || strings.EqualFold(name, "x-gzip")
}

// weight is what an Accept-Encoding says of one coding: AcceptsGzip only
// needs to know whether its weight is above 0.
type weight int

const (
	unnamed weight = iota // the coding is not in the header
	refused               // named with a weight of 0
	wanted                // named with a weight above 0, or none (1)
)

// weightOf reads a coding's parameters (";q=0.5", perhaps beside others a
// client added). A weight that is not a qvalue (0 to 1, at most three
// decimals: RFC 9110, 12.4.2) counts as 0, so a header that cannot be
// read gets the stream plain, which every client takes.
func weightOf(params string) weight {
	for p := range strings.SplitSeq(params, ";") {
		name, v, _ := strings.Cut(p, "=")
		if !strings.EqualFold(strings.TrimSpace(name), "q") {
			continue
		}
		whole, frac, _ := strings.Cut(strings.TrimSpace(v), ".")
		if len(frac) > 3 || strings.Trim(frac, "0123456789") != "" {
			return refused
		}
		switch {
		case whole == "1" && strings.Trim(frac, "0") == "":
			return wanted
		case whole == "0" && strings.Trim(frac, "0") != "":
			return wanted
		}
		return refused
	}
	return wanted
}

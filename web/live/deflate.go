package live

import (
	"bytes"
	"compress/flate"
	"net/http"
	"strconv"
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

// deflaters keeps compressors between frames: one is a few hundred KB.
var deflaters = sync.Pool{New: func() any {
	w, _ := flate.NewWriter(nil, flate.DefaultCompression)
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

// AcceptsGzip says whether r's Accept-Encoding names gzip (with a q of
// 0 it refuses it). Every browser's EventSource names it.
func AcceptsGzip(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept-Encoding") {
		for part := range strings.SplitSeq(v, ",") {
			name, params, _ := strings.Cut(part, ";")
			if name = strings.TrimSpace(name); !strings.EqualFold(name, "gzip") {
				continue
			}
			q, ok := strings.CutPrefix(strings.TrimSpace(params), "q=")
			if !ok {
				return true
			}
			f, err := strconv.ParseFloat(strings.TrimSpace(q), 64)
			return err == nil && f > 0
		}
	}
	return false
}

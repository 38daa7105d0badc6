// Package static holds the files browsers load: vendored htmx 2.0.11 and
// its SSE extension 2.2.4, the style sheet and the small payment client.
// They are embedded in the binary, so the app needs no CDN and no network.
package static

import "embed"

// FS holds the static files at its root.
//
//go:embed *.js *.css *.svg LICENSE-htmx.txt
var FS embed.FS

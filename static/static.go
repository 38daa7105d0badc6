// Package static holds the files browsers load: vendored htmx 2.0.11 and
// its SSE extension 2.2.4, the style sheets, the icon and the small
// scripts of the live pages. They are embedded in the binary, so the app
// needs no CDN and no network.
//
// Every file is also known under a name that carries a hash of its
// content (pay.js as pay.3f2a1b9c0d.js), worked out once when the program
// starts. Pages link to those names (Path), so a browser may cache a file
// for good: a redeploy that changes pay.js changes its address, and no
// page can pair new HTML with an old script.
package static

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"path"
	"strings"
)

// FS holds the static files at its root.
//
//go:embed *.js *.css *.svg LICENSE-htmx.txt
var FS embed.FS

// File is one embedded file.
type File struct {
	Name    string // as embedded: "pay.js"
	Hashed  string // with the content hash before the extension: "pay.3f2a1b9c0d.js"
	Hash    string // the hash alone, also the file's ETag
	Content []byte
}

// hashLen is how many hex digits of the SHA-256 a hashed name keeps: 40
// bits, plenty to tell two versions of one file apart.
const hashLen = 10

var byName, byHashed = index()

func index() (byName, byHashed map[string]*File) {
	byName, byHashed = map[string]*File{}, map[string]*File{}
	entries, err := fs.ReadDir(FS, ".")
	if err != nil {
		panic(err) // an embed.FS always reads
	}
	for _, e := range entries {
		b, err := FS.ReadFile(e.Name())
		if err != nil {
			panic(err)
		}
		sum := sha256.Sum256(b)
		f := &File{Name: e.Name(), Hash: hex.EncodeToString(sum[:])[:hashLen], Content: b}
		ext := path.Ext(f.Name)
		f.Hashed = strings.TrimSuffix(f.Name, ext) + "." + f.Hash + ext
		byName[f.Name], byHashed[f.Hashed] = f, f
	}
	return byName, byHashed
}

// Path is the address of the named file under its content-hashed name:
// Path("pay.js") is "/static/pay.3f2a1b9c0d.js". A name that is not
// embedded panics, so a mistyped link fails every test that renders it.
func Path(name string) string {
	f, ok := byName[name]
	if !ok {
		panic("static: no file " + name)
	}
	return "/static/" + f.Hashed
}

// Lookup finds a requested name: a hashed one (immutable is true: its
// content never changes) or a plain one, which old pages and hand-typed
// addresses still use.
func Lookup(requested string) (f *File, immutable, ok bool) {
	if f, ok := byHashed[requested]; ok {
		return f, true, true
	}
	f, ok = byName[requested]
	return f, false, ok
}

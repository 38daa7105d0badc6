package static

import (
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"strings"
	"testing"
)

func TestEveryFileHasAContentHashedName(t *testing.T) {
	entries, err := fs.ReadDir(FS, ".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, _ := FS.ReadFile(e.Name())
		sum := sha256.Sum256(b)
		p := Path(e.Name())
		// The address changes when the content does, and keeps the
		// extension, so the content type stays right.
		if want := hex.EncodeToString(sum[:])[:hashLen]; !strings.Contains(p, "."+want+".") {
			t.Errorf("%s is served as %s, without its hash %s", e.Name(), p, want)
		}
		hashed := strings.TrimPrefix(p, "/static/")
		f, immutable, ok := Lookup(hashed)
		if !ok || !immutable || f.Name != e.Name() || string(f.Content) != string(b) {
			t.Errorf("Lookup(%q) = %v, %v, %v", hashed, f, immutable, ok)
		}
		if f, immutable, ok := Lookup(e.Name()); !ok || immutable || f.Hashed != hashed {
			t.Errorf("Lookup(%q) = %v, %v, %v", e.Name(), f, immutable, ok)
		}
	}
	if p := Path("htmx-2.0.11.min.js"); !strings.HasPrefix(p, "/static/htmx-2.0.11.min.") || !strings.HasSuffix(p, ".js") {
		t.Errorf("htmx is at %s", p)
	}
}

func TestUnknownNames(t *testing.T) {
	for _, name := range []string{"", "pay.0000000000.js", "static.go", "../go.mod", "pay"} {
		if _, _, ok := Lookup(name); ok {
			t.Errorf("Lookup(%q) found a file", name)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("Path of a file that is not embedded did not panic")
		}
	}()
	Path("pay.min.js")
}

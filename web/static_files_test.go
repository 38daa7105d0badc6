package web

import (
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"paytwice/static"
)

func TestStaticFiles(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, Config{})

	t.Run("pages link only to hashed names, which are cached for good", func(t *testing.T) {
		ref := regexp.MustCompile(`(?:src|href)="(/static/[^"]+)"`)
		seen := map[string]bool{}
		for _, page := range []string{"/", "/board", "/backoff", "/herd?max=20&trials=1", "/problems", "/?lesson=fails-halfway"} {
			res := env.get(page, "Accept", "text/html")
			if res.Status != http.StatusOK {
				t.Fatalf("GET %s: %d", page, res.Status)
			}
			for _, m := range ref.FindAllStringSubmatch(string(res.Body), -1) {
				seen[m[1]] = true
			}
		}
		for _, name := range []string{"app.css", "live.css", "lab.css", "charts.css", "board.css", "favicon.svg", "api.js", "pay.js", "lab.js",
			"htmx-2.0.11.min.js", "htmx-ext-sse-2.2.4.min.js"} {
			if !seen[static.Path(name)] {
				t.Errorf("no page links to %s as %s", name, static.Path(name))
			}
		}
		for p := range seen {
			if _, immutable, ok := static.Lookup(strings.TrimPrefix(p, "/static/")); !ok || !immutable {
				t.Errorf("a page links to %s, not to a hashed name", p)
			}
			res := env.get(p)
			if res.Status != http.StatusOK || res.Header.Get("Cache-Control") != "public, max-age=31536000, immutable" {
				t.Errorf("GET %s: %d, Cache-Control %q", p, res.Status, res.Header.Get("Cache-Control"))
			}
		}
	})

	t.Run("no template links to a plain name", func(t *testing.T) {
		files, err := filepath.Glob("../views/*.templ")
		if err != nil || len(files) == 0 {
			t.Fatalf("no templates found: %v", err)
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(b), `"/static/`) {
				t.Errorf("%s links to a file under its plain name; use asset(name)", f)
			}
		}
	})

	t.Run("a plain name still works, revalidated by its ETag", func(t *testing.T) {
		res := env.get("/static/pay.js")
		etag := res.Header.Get("ETag")
		if res.Status != http.StatusOK || res.Header.Get("Cache-Control") != "no-cache" || etag == "" ||
			!strings.HasPrefix(res.Header.Get("Content-Type"), "text/javascript") {
			t.Fatalf("GET /static/pay.js: %d, headers %v", res.Status, res.Header)
		}
		if again := env.get("/static/pay.js", "If-None-Match", etag); again.Status != http.StatusNotModified {
			t.Errorf("If-None-Match %s: %d, want 304", etag, again.Status)
		}
		if !strings.Contains(static.Path("pay.js"), "."+strings.Trim(etag, `"`)+".") {
			t.Errorf("ETag %s is not the hash in %s", etag, static.Path("pay.js"))
		}
	})

	t.Run("an old or unknown name is a 404", func(t *testing.T) {
		for _, p := range []string{"/static/pay.0000000000.js", "/static/", "/static/static.go", "/static/nope.css"} {
			if res := env.get(p); res.Status != http.StatusNotFound {
				t.Errorf("GET %s: %d", p, res.Status)
			}
		}
	})
}

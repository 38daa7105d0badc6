package main

import (
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImportsPointOneWay holds the layout's rules about imports against
// what the go command reports: the storage layer and the protocol never
// depend on the web layer, and the command-line files take nothing from
// a web package.
func TestImportsPointOneWay(t *testing.T) {
	deps := func(t *testing.T, pkgs ...string) map[string][]string {
		t.Helper()
		args := append([]string{"list", "-deps", "-test=false", "-f", `{{.ImportPath}}{{range .Deps}} {{.}}{{end}}`}, pkgs...)
		out, err := exec.Command("go", args...).Output()
		if err != nil {
			t.Fatalf("go list: %v", err)
		}
		m := map[string][]string{}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			f := strings.Fields(line)
			m[f[0]] = f[1:]
		}
		return m
	}
	t.Run("nothing under store/ depends on web/", func(t *testing.T) {
		for pkg, ds := range deps(t, "./store/...") {
			if !strings.HasPrefix(pkg, "paytwice/store") {
				continue
			}
			for _, d := range ds {
				if d == "paytwice/web" || strings.HasPrefix(d, "paytwice/web/") {
					t.Errorf("%s depends on %s", pkg, d)
				}
			}
		}
	})
	t.Run("pay depends on nothing of this project outside pay/", func(t *testing.T) {
		for pkg, ds := range deps(t, "./pay/...") {
			if !strings.HasPrefix(pkg, "paytwice/pay") {
				continue
			}
			for _, d := range ds {
				if strings.HasPrefix(d, "paytwice/") && !strings.HasPrefix(d, "paytwice/pay") {
					t.Errorf("%s depends on %s", pkg, d)
				}
			}
		}
	})
	t.Run("the command files import no web package", func(t *testing.T) {
		files, _ := filepath.Glob("cmd*.go")
		if len(files) < 5 {
			t.Fatalf("found only %v", files)
		}
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range f.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				if p == "paytwice/web" || strings.HasPrefix(p, "paytwice/web/") {
					t.Errorf("%s imports %s", path, p)
				}
			}
		}
	})
}

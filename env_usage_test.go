package main

import (
	"bytes"
	"context"
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// envNameLiteral is how the code spells a variable of its own, or the
// prefix of the PostgreSQL driver's TLS variables it looks for.
var envNameLiteral = regexp.MustCompile(`^(PAYTWICE_[A-Z0-9_]+|PGSSL[A-Z]*)$`)

// environmentReads lists the environment variables the code in dirs
// reads: every string argument of a call to Getenv, LookupEnv or the
// getenv that main passes around, every constant such a call is given,
// and every literal spelled like one of the program's own variables.
func environmentReads(t *testing.T, dirs []string) map[string]string {
	t.Helper()
	names := map[string]string{} // name → where it was found
	for _, dir := range dirs {
		fset := token.NewFileSet()
		files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		consts := map[string]string{}
		var parsed []*ast.File
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			// Files the ordinary build leaves out (the pprof tag's) are
			// not the program a user runs.
			if ok, err := build.Default.MatchFile(dir, filepath.Base(path)); err != nil || !ok {
				continue
			}
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			parsed = append(parsed, f)
			ast.Inspect(f, func(n ast.Node) bool {
				if vs, ok := n.(*ast.ValueSpec); ok {
					for i, name := range vs.Names {
						if i < len(vs.Values) {
							if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
								consts[name.Name], _ = strconv.Unquote(lit.Value)
							}
						}
					}
				}
				return true
			})
		}
		for _, f := range parsed {
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.BasicLit:
					if v, err := strconv.Unquote(n.Value); err == nil && n.Kind == token.STRING && envNameLiteral.MatchString(v) {
						names[v] = fset.Position(n.Pos()).String()
					}
				case *ast.CallExpr:
					var fn string
					switch f := n.Fun.(type) {
					case *ast.Ident:
						fn = f.Name
					case *ast.SelectorExpr:
						fn = f.Sel.Name
					}
					if fn != "Getenv" && fn != "LookupEnv" && fn != "getenv" || len(n.Args) != 1 {
						return true
					}
					switch a := n.Args[0].(type) {
					case *ast.BasicLit:
						if v, err := strconv.Unquote(a.Value); err == nil {
							names[v] = fset.Position(a.Pos()).String()
						}
					case *ast.Ident:
						if v, ok := consts[a.Name]; ok {
							names[v] = fset.Position(a.Pos()).String()
						}
					}
				}
				return true
			})
		}
	}
	return names
}

func TestUsageNamesEveryEnvironmentVariable(t *testing.T) {
	// The packages linked into the binary, as the go command sees them:
	// helpers only tests import (store/postgres/pgtest) read variables of
	// the tests, not of the program.
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}} {{.Dir}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var dirs []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, dir, _ := strings.Cut(line, " ")
		if path == "paytwice" || strings.HasPrefix(path, "paytwice/") {
			dirs = append(dirs, dir)
		}
	}
	if len(dirs) < 5 {
		t.Fatalf("go list found only %v", dirs)
	}
	names := environmentReads(t, dirs)
	for _, want := range []string{"PAYTWICE_DB", "PAYTWICE_PRESENTER_COOKIE_KEY", "GOMEMLIMIT", "PGSSL"} {
		if _, ok := names[want]; !ok { // the scan itself still sees what it must
			t.Errorf("the scan of the code missed %s; found %v", want, names)
		}
	}
	var usage bytes.Buffer
	if err := run(context.Background(), []string{"-h"}, func(string) string { return "" }, &usage, io.Discard); err != nil {
		t.Fatal(err)
	}
	for name, where := range names {
		if !strings.Contains(usage.String(), name) {
			t.Errorf("%s (read at %s) is not in paytwice -h", name, where)
		}
	}
}

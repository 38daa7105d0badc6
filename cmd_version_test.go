package main

import (
	"context"
	"io"
	"os"
	"os/exec"
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersionText(t *testing.T) {
	t.Run("a stamped build names its version, revision, time and a modified tree", func(t *testing.T) {
		bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "paytwice", Version: "v0.0.0-20261204143000-6930525abcde+dirty"},
			Settings: []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "6930525abcdef0123456789abcdef0123456789a"},
				{Key: "vcs.time", Value: "2026-12-04T14:30:00Z"}, {Key: "vcs.modified", Value: "true"}}}
		want := "paytwice v0.0.0-20261204143000-6930525abcde+dirty\nrevision 6930525abcdef0123456789abcdef0123456789a (2026-12-04T14:30:00Z) modified\ngo1.26.8\n"
		if got := versionText(bi, true); got != want {
			t.Errorf("got\n%s\nwant\n%s", got, want)
		}
	})
	t.Run("a build without VCS information says the revision is unknown", func(t *testing.T) {
		bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "paytwice", Version: "(devel)"}}
		got := versionText(bi, true)
		if !strings.HasPrefix(got, "paytwice (devel)\nrevision unknown") {
			t.Errorf("got\n%s", got)
		}
	})
	t.Run("no build information at all is said, not guessed", func(t *testing.T) {
		if got := versionText(nil, false); !strings.Contains(got, "no build information") {
			t.Errorf("got %q", got)
		}
	})
}

func TestVersionCommand(t *testing.T) {
	t.Run("version and -version print the same, in process", func(t *testing.T) {
		sub, _, code := runMain(t, "", nil, "version")
		flagOut, _, flagCode := runMain(t, "", nil, "-version")
		if code != 0 || flagCode != 0 || sub != flagOut || !strings.HasPrefix(sub, "paytwice ") {
			t.Errorf("version (%d):\n%s\n-version (%d):\n%s", code, sub, flagCode, flagOut)
		}
	})
	t.Run("version takes no argument", func(t *testing.T) {
		_, stderr, code := runMain(t, "", nil, "version", "extra")
		if code != 2 || !strings.Contains(stderr, `unexpected argument "extra"`) || !strings.Contains(stderr, "usage: paytwice version") {
			t.Errorf("exit %d, stderr %q", code, stderr)
		}
	})
	t.Run("the built binary names the commit it was built from", func(t *testing.T) {
		bin := binary(t) // go build -buildvcs=auto in this checkout, which stamps the VCS revision
		out, err := exec.Command(bin, "version").Output()
		if err != nil {
			t.Fatalf("paytwice version: %v", err)
		}
		flagOut, err := exec.Command(bin, "-version").Output()
		if err != nil || string(flagOut) != string(out) {
			t.Errorf("paytwice -version (%v) printed\n%s\nwhere paytwice version printed\n%s", err, flagOut, out)
		}
		// go build stamps a revision when the module's root holds a .git
		// directory (a git worktree's .git is a file, which it passes over).
		head, err := exec.Command("git", "rev-parse", "HEAD").Output()
		if fi, statErr := os.Stat(".git"); err != nil || statErr != nil || !fi.IsDir() {
			if !strings.Contains(string(out), "revision unknown") {
				t.Errorf("without a .git directory, printed\n%s", out)
			}
			return
		}
		if want := "revision " + strings.TrimSpace(string(head)); !strings.Contains(string(out), want) {
			t.Errorf("printed\n%s\nwant a line starting %q", out, want)
		}
	})
	t.Run("help lists the command", func(t *testing.T) {
		var out strings.Builder
		if err := run(context.Background(), []string{"help"}, func(string) string { return "" }, &out, io.Discard); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), "version  print the module version") {
			t.Errorf("usage:\n%s", out.String())
		}
	})
}

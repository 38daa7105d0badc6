package main

import (
	"context"
	"fmt"
	"io"
	"runtime/debug"
	"strings"
)

// runVersion is "paytwice version": which build of paytwice this is, as
// the Go toolchain recorded it in the binary, so that a report or a bug
// can name the exact code that ran.
func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("version", "Prints the module version, the VCS revision and time of the commit the binary was built\n"+
		"from (\"modified\" when the checkout had uncommitted changes), and the Go version. The\n"+
		"revision is stamped by go build in a checkout; go run and go test leave it out. The server\n"+
		"takes -version for the same.", stdout, stderr)
	if help, err := fs.parse(args); help || err != nil {
		return err
	}
	bi, ok := debug.ReadBuildInfo()
	fmt.Fprint(stdout, versionText(bi, ok))
	return nil
}

// versionText says what build info holds: the main module's version
// ("(devel)" when built outside a module download), the revision, its
// time and whether the tree was modified (only when built with VCS
// stamping: go build in a checkout, not go run or go test), and the Go
// version. What the binary does not know it says it does not know.
func versionText(bi *debug.BuildInfo, ok bool) string {
	if !ok || bi == nil {
		return "paytwice: no build information in this binary\n"
	}
	var b strings.Builder
	version := bi.Main.Version
	if version == "" {
		version = "(unknown)"
	}
	fmt.Fprintf(&b, "paytwice %s\n", version)
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	if rev := settings["vcs.revision"]; rev != "" {
		fmt.Fprintf(&b, "revision %s", rev)
		if t := settings["vcs.time"]; t != "" {
			fmt.Fprintf(&b, " (%s)", t)
		}
		if settings["vcs.modified"] == "true" {
			b.WriteString(" modified")
		}
		b.WriteString("\n")
	} else {
		b.WriteString("revision unknown: built without VCS information (go run, go test, or outside a checkout)\n")
	}
	fmt.Fprintf(&b, "%s\n", bi.GoVersion)
	return b.String()
}

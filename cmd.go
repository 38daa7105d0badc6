package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strings"

	"paytwice/sim/report"
)

// subcommands are the commands that run instead of the server when their
// name is the first argument: paytwice backoff|herd|pay [flags].
var subcommands = map[string]func(ctx context.Context, args []string, stdout, stderr io.Writer) error{
	"backoff": runBackoff,
	"bench":   runBench,
	"herd":    runHerd,
	"pay":     runPay,
}

// errUsage is returned after the flag package has already printed what was
// wrong and how to call the command.
var errUsage = errors.New("bad usage; see the message above")

// newFlags makes a subcommand's flag set, printing its usage to stderr.
func newFlags(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("paytwice "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: paytwice %s [flags]\n\n%s\n\nflags:\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args; -h is not an error.
func parseFlags(fs *flag.FlagSet, args []string) (help bool, err error) {
	err = fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		return true, nil
	}
	if err != nil {
		return false, errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return false, errUsage
	}
	return false, nil
}

// query turns string flags into the query the web API would receive, so
// the command line and the API share one parser and one set of messages.
func query(values map[string]*string) url.Values {
	q := url.Values{}
	for name, v := range values {
		q.Set(name, *v)
	}
	return q
}

// flagError words a parameter error in terms of the command's flags.
func flagError(err error) error {
	var fe report.FieldErrors
	if !errors.As(err, &fe) {
		return err
	}
	parts := make([]string, len(fe))
	for i, e := range fe {
		parts[i] = "-" + e.Field + " " + e.Msg
	}
	return errors.New(strings.Join(parts, "; "))
}

// writeJSON prints v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

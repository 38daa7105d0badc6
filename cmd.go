package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"syscall"

	"paytwice/sim/report"
)

// subcommands are the commands that run instead of the server when their
// name is the first argument: paytwice backoff|bench|check|cluster|herd|pay|proxy|version [flags].
var subcommands = map[string]func(ctx context.Context, args []string, stdout, stderr io.Writer) error{
	"backoff": runBackoff,
	"bench":   runBench,
	"check":   runCheck,
	"cluster": runCluster,
	"herd":    runHerd,
	"pay":     runPay,
	"proxy":   runProxy,
	"version": runVersion,
}

// commandSummaries say in one line what each command does, for the usage.
var commandSummaries = map[string]string{
	"backoff": "print a retry policy's schedule and how a crowd of clients retries under it",
	"herd":    "simulate clients contending for one row under each backoff strategy",
	"pay":     "pay once against a running server, retrying with one idempotency key",
	"proxy":   "put a client behind a proxy that injects failures, and grade its retries against ten rules",
	"bench":   "send payments to an idempotent endpoint and measure throughput and latency",
	"check":   "test an endpoint's Idempotency-Key behaviour from outside, and check the history for linearizability",
	"cluster": "run several servers on one PostgreSQL database behind a round-robin front door",
	"version": "print the module version and the VCS revision this binary was built from",
}

// errUsage is returned once what was wrong with the command line and how
// to call the command have been printed; the process exits with status 2.
var errUsage = errors.New("bad usage; see the message above")

// valueError is a flag or an environment variable with a value the
// command cannot use: a usage error like any other (exit status 2), said
// in one line.
type valueError struct{ error }

func (e valueError) Unwrap() error { return e.error }

// badValue is a valueError with a formatted message.
func badValue(format string, args ...any) error { return valueError{fmt.Errorf(format, args...)} }

// printUsage prints how to call paytwice: the commands, then the server's
// flags.
func printUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprint(w, `usage: paytwice [flags]            serve the payments API and the live pages
       paytwice <command> [flags]  run a command instead of the server
       paytwice help [command]     print this, or a command's flags

commands:
`)
	names := make([]string, 0, len(subcommands))
	for name := range subcommands {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		fmt.Fprintf(w, "  %-8s %s\n", name, commandSummaries[name])
	}
	fmt.Fprint(w, "\nserver flags (each can also be set by its environment variable):\n")
	out := fs.Output()
	fs.SetOutput(w)
	printDefaults(fs)
	fs.SetOutput(out)
	fmt.Fprint(w, environmentUsage)
}

// environmentUsage lists the environment variables the program reads
// besides the flags' own: every one of them is in the usage
// (TestUsageNamesEveryEnvironmentVariable reads the code for them).
const environmentUsage = `
environment, besides the variable of each flag above:
  PAYTWICE_PRESENTER_COOKIE_KEY
    	the key that signs the presenter's cookie; give the servers behind one load balancer the
    	same one (default: a random key at each start). A variable only, never a flag: a command
    	line is visible to every user of the machine
  GOGC, GOMEMLIMIT
    	when either is set, the server leaves the garbage collector to them and keeps no heap floor;
    	GOMEMLIMIT wins over -memory-limit
  GOMAXPROCS
    	the cores a server runs Go code on (default: all it may use); paytwice cluster gives each of
    	its servers its share of them unless this is set, and then hands this to each as it is
  PGSSLMODE and the other PG... variables
    	with a postgres:// -db, read by the PostgreSQL driver (pgx); a PGSSL... variable keeps TLS
    	to a PostgreSQL on this machine, which is otherwise reached without it
  PAYTWICE_LISTEN_FD, PAYTWICE_FRONT_DOOR_MARK
    	set by paytwice cluster for the servers it starts (the socket each listens on, the mark of
    	its front door); not for setting by hand
  PAYTWICE_TIMER_SLACK_EXEC
    	set by a server for itself when it replaces its process to take its timer slack, so that it
    	does so once; not for setting by hand
`

// secretFlags are the flags whose value may hold a password or a token,
// taken from the environment as their default. Their defaults are never
// printed: a usage on a projector must not show them.
var secretFlags = map[string]bool{"db": true, "gateway-db": true, "presenter-token": true}

// printDefaults is fs.PrintDefaults with the defaults of secretFlags
// hidden: a database URL keeps its shape with its password masked (what
// url.URL.Redacted shows), and a token is only said to be set.
func printDefaults(fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		if !secretFlags[f.Name] || f.DefValue == "" {
			return
		}
		if u, err := url.Parse(f.DefValue); err == nil && u.User != nil {
			f.DefValue = u.Redacted()
		} else if f.Name == "presenter-token" || strings.Contains(f.DefValue, "://") {
			f.DefValue = "set in the environment, not shown"
		}
	})
	fs.PrintDefaults()
}

// help is "paytwice help [command]": the usage on stdout, or the command's
// own flags.
func help(args []string, stdout, stderr io.Writer, fs *flag.FlagSet) error {
	switch {
	case len(args) == 0:
		printUsage(stdout, fs)
		return nil
	case len(args) > 1:
		return badUsage(stderr, fs, fmt.Sprintf("unexpected argument %q: help takes one command name", args[1]))
	}
	sub, ok := subcommands[args[0]]
	if !ok {
		return badUsage(stderr, fs, unknownCommand(args[0]))
	}
	return sub(context.Background(), []string{"-h"}, stdout, stderr)
}

// badUsage prints what was wrong and the usage, and returns errUsage.
func badUsage(stderr io.Writer, fs *flag.FlagSet, msg string) error {
	fmt.Fprintf(stderr, "paytwice: %s\n\n", msg)
	printUsage(stderr, fs)
	return errUsage
}

// unexpectedArg explains an argument that is neither a flag nor a command
// in first place.
func unexpectedArg(arg string) string {
	if _, ok := subcommands[arg]; ok || arg == "help" {
		return fmt.Sprintf("unexpected argument %q: a command comes first, before any flag (paytwice %s -h)", arg, arg)
	}
	return fmt.Sprintf("unexpected argument %q: the server takes only flags", arg)
}

// unknownCommand names the command that was meant when the word is one
// typing mistake away from it.
func unknownCommand(name string) string {
	msg := fmt.Sprintf("unknown command %q", name)
	for cmd := range subcommands {
		if oneEditApart(name, cmd) {
			return msg + fmt.Sprintf("; did you mean %q?", cmd)
		}
	}
	return msg
}

// oneEditApart reports whether a becomes b by one inserted, deleted or
// replaced letter, or by two neighbours swapped ("hred" for "herd").
func oneEditApart(a, b string) bool {
	if a == b {
		return false
	}
	if len(a) == len(b) {
		var diff []int
		for i := range a {
			if a[i] != b[i] {
				diff = append(diff, i)
			}
		}
		return len(diff) == 1 ||
			len(diff) == 2 && diff[1] == diff[0]+1 && a[diff[0]] == b[diff[1]] && a[diff[1]] == b[diff[0]]
	}
	if len(a) < len(b) {
		a, b = b, a
	}
	if len(a) != len(b)+1 {
		return false
	}
	for i := range b {
		if a[i] != b[i] {
			return a[i+1:] == b[i:]
		}
	}
	return true
}

// listenError explains a listen address that cannot be used, naming the
// flag and the variable that choose another.
func listenError(addr string, err error) error {
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("cannot listen on %s: the address is already in use (is paytwice already running?); "+
			"choose another with -addr or PAYTWICE_ADDR, such as -addr 127.0.0.1:8081", addr)
	}
	return fmt.Errorf("cannot listen on %s (set by -addr or PAYTWICE_ADDR): %w", addr, err)
}

// cmdFlags is a command's flag set and where its usage goes: to stdout
// when it is asked for (-h, as paytwice help CMD prints it), to stderr
// after a wrong command line (exit status 2).
type cmdFlags struct {
	*flag.FlagSet
	stdout io.Writer
	usage  func(w io.Writer)
}

// newFlags makes a subcommand's flag set; its errors go to stderr.
func newFlags(name, synopsis string, stdout, stderr io.Writer) *cmdFlags {
	fs := &cmdFlags{FlagSet: flag.NewFlagSet("paytwice "+name, flag.ContinueOnError), stdout: stdout}
	fs.SetOutput(stderr)
	fs.usage = func(w io.Writer) {
		fmt.Fprintf(w, "usage: paytwice %s [flags]\n\n%s\n\nflags:\n", name, synopsis)
		out := fs.Output()
		fs.SetOutput(w)
		printDefaults(fs.FlagSet)
		fs.SetOutput(out)
	}
	// The flag package calls Usage both for -h and after an error; parse
	// prints it instead, where it knows which of the two it was.
	fs.Usage = func() {}
	return fs
}

// parse parses args, which are flags only; -h is not an error.
func (fs *cmdFlags) parse(args []string) (help bool, err error) {
	if help, err := fs.parseSome(args); help || err != nil {
		return help, err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "unexpected argument %q\n", fs.Arg(0))
		fs.usage(fs.Output())
		return false, errUsage
	}
	return false, nil
}

// parseSome parses the flags of args up to the first argument that is not
// one: -h prints the usage on stdout and is not an error; a flag that is
// wrong prints the usage on stderr, after the flag package's message.
func (fs *cmdFlags) parseSome(args []string) (help bool, err error) {
	err = fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.usage(fs.stdout)
		return true, nil
	case err != nil:
		fs.usage(fs.Output())
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
	return valueError{errors.New(strings.Join(parts, "; "))}
}

// writeJSON prints v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"paytwice/sim/report"
)

// runCmd runs a subcommand as main would and returns what it printed.
func runCmd(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	sub, ok := subcommands[args[0]]
	if !ok {
		t.Fatalf("no subcommand %q", args[0])
	}
	var out, errOut bytes.Buffer
	err = sub(context.Background(), args[1:], &out, &errOut)
	return out.String(), errOut.String(), err
}

func TestBackoffCommand(t *testing.T) {
	t.Run("the article's example prints its table, totals and spread", func(t *testing.T) {
		out, _, err := runCmd(t, "backoff", "-base", "0.5", "-cap", "8", "-retries", "5")
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{
			"Retry 1 is the first retry after the original request failed; it uses n = 0.",
			"1      0  0.5 s      0 – 0.5 s  0.25 s",
			"5      4  8 s (cap)  0 – 8 s    4 s",
			"worst-case total wait  15.5 s",
			"mean total wait        7.75 s",
			"2 requests per ms on average",
			"none          all at 0 ms",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
	})

	t.Run("-json prints what GET /api/backoff answers", func(t *testing.T) {
		out, _, err := runCmd(t, "backoff", "-json")
		if err != nil {
			t.Fatal(err)
		}
		var rep report.Backoff
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatal(err)
		}
		if rep.Totals.WorstSeconds != 15.5 || rep.Totals.MeanSeconds != 7.75 || rep.Spread.FirstRoundPerMs != 2 {
			t.Errorf("report %+v", rep.Totals)
		}
	})

	t.Run("bad flags name the flag", func(t *testing.T) {
		_, _, err := runCmd(t, "backoff", "-cap", "0.1", "-clients", "0")
		if err == nil || !strings.Contains(err.Error(), "-cap must be at least the base") || !strings.Contains(err.Error(), "-clients must be at least 1") {
			t.Errorf("error %v", err)
		}
	})

	t.Run("an unknown flag prints the usage", func(t *testing.T) {
		_, stderr, err := runCmd(t, "backoff", "-bogus")
		if err == nil || !strings.Contains(stderr, "usage: paytwice backoff") {
			t.Errorf("error %v, stderr %q", err, stderr)
		}
	})

	t.Run("-h is help, not an error", func(t *testing.T) {
		if stdout, _, err := runCmd(t, "backoff", "-h"); err != nil || !strings.Contains(stdout, "-strategy") {
			t.Errorf("error %v, stdout %q", err, stdout)
		}
	})
}

func TestHerdCommand(t *testing.T) {
	t.Run("it prints a row per client count with every strategy", func(t *testing.T) {
		out, _, err := runCmd(t, "herd", "-min", "10", "-max", "30", "-step", "10", "-trials", "2")
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"10 to 30 clients", "none  exponential", "decorrelated", "Work:", "Completion:"} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
		if rows := regexp.MustCompile(`(?m)^\s+(10|20|30)\s`).FindAllString(out, -1); len(rows) != 6 {
			t.Errorf("%d rows, want 3 per table:\n%s", len(rows), out)
		}
	})

	t.Run("-json prints what GET /api/herd answers", func(t *testing.T) {
		out, _, err := runCmd(t, "herd", "-min", "10", "-max", "20", "-step", "10", "-trials", "2", "-json")
		if err != nil {
			t.Fatal(err)
		}
		var rep report.Herd
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatal(err)
		}
		if len(rep.Points) != 10 || rep.Params.Trials != 2 {
			t.Errorf("report %+v", rep)
		}
	})

	t.Run("bad flags name the flag", func(t *testing.T) {
		if _, _, err := runCmd(t, "herd", "-min", "50", "-max", "10"); err == nil || !strings.Contains(err.Error(), "-max must be at least min") {
			t.Errorf("error %v", err)
		}
	})
}

// testBinary builds the paytwice binary once for every test that runs it
// (the commands, the crash and the shutdown tests).
var testBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "paytwice-cmd-test")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "paytwice")
	// go test puts the go command that runs it first on PATH.
	// -buildvcs=auto stamps the revision as a plain go build in a
	// checkout does, whatever GOFLAGS says (paytwice version shows it).
	goCmd, err := exec.LookPath("go")
	if err != nil {
		return "", err
	}
	if out, err := exec.Command(goCmd, "build", "-buildvcs=auto", "-o", bin, ".").CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

// TestMain lets the tests that wait side by side (waitsSideBySide,
// clientsSideBySide) be more than the machine's cores. An explicit
// -parallel wins.
func TestMain(m *testing.M) {
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		_ = flag.Set("test.parallel", strconv.Itoa(max(6, runtime.GOMAXPROCS(0))))
	}
	code := m.Run()
	sharedBrowser.Stop()
	if bin, err := testBinary(); err == nil && bin != "" {
		os.RemoveAll(filepath.Dir(bin))
	}
	os.Exit(code)
}

// waitsSideBySide marks a test whose time goes in waiting on a client's
// backoff, a gateway's latency or a browser's page, on servers and files
// of its own: it runs beside the other such tests (t.Parallel), after
// the package's other tests, none of which it can see. Call it first.
func waitsSideBySide(t *testing.T) {
	t.Helper()
	t.Parallel()
}

// clientTurns holds one token per graded client running. The proxy
// grades a client's backoff by the waits it measures (rule 7: they grow,
// and they are spread): many clients at once on two busy cores would
// wake late enough to blur them. Three at once under the race detector,
// beside the web package's tests, blurred a client with no jitter into
// one that passes rule 7: one at a time there. Without it two run at
// once: one at a time, the dozen graded clients were the root package's
// longest chain (about 100 s of a quick run's 133 s), and the package's
// end bounds the web packages that run after it.
var clientTurns = make(chan struct{}, clientsAtOnce())

// clientsAtOnce is how many graded clients run at once (clientTurns).
func clientsAtOnce() int {
	if raceDetector {
		return 1
	}
	return 2
}

// clientsSideBySide is waitsSideBySide for a test whose client the proxy
// grades: it runs beside the others, len(clientTurns) at a time.
func clientsSideBySide(t *testing.T) {
	t.Helper()
	t.Parallel()
	clientTurns <- struct{}{}
	t.Cleanup(func() { <-clientTurns })
}

func binary(t *testing.T) string {
	t.Helper()
	bin, err := testBinary()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// payServer is the real binary serving on a free loopback port over a
// fresh SQLite file.
func payServer(t *testing.T) string {
	t.Helper()
	bin := binary(t) // built first: the minute below is for the start alone
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return startServer(ctx, t, bin, filepath.Join(t.TempDir(), "paytwice.db")).url
}

func TestPayCommand(t *testing.T) {
	url := payServer(t)

	t.Run("it pays once and prints the attempt", func(t *testing.T) {
		out, _, err := runCmd(t, "pay", "-url", url, "-order", "A-1001", "-amount", "129900", "-token", "cli-test")
		if err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(`attempt 1  key [0-9a-f-]{36}  201 Created`).MatchString(out) || !strings.Contains(out, `"status":"paid"`) {
			t.Errorf("output:\n%s", out)
		}
	})

	t.Run("the same key again is replayed, not charged again", func(t *testing.T) {
		args := []string{"pay", "-url", url, "-order", "A-2002", "-amount", "5000", "-token", "cli-test", "-key", "cli-key-1"}
		first, _, err := runCmd(t, args...)
		if err != nil {
			t.Fatal(err)
		}
		second, _, err := runCmd(t, args...)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(first, "replayed") || !strings.Contains(second, "attempt 1  key cli-key-1  201 Created  (replayed)") {
			t.Errorf("first:\n%s\nsecond:\n%s", first, second)
		}
		id := regexp.MustCompile(`"charge_id":"[^"]+"`)
		if id.FindString(first) != id.FindString(second) {
			t.Error("the replay shows another charge")
		}
	})

	t.Run("a different body on the same key is a 422 and an error", func(t *testing.T) {
		out, _, err := runCmd(t, "pay", "-url", url, "-order", "A-2002", "-amount", "9999", "-token", "cli-test", "-key", "cli-key-1")
		if err == nil || !strings.Contains(out, "422") || strings.Count(out, "attempt ") != 1 {
			t.Errorf("error %v, output:\n%s", err, out)
		}
	})

	t.Run("bad flags are refused before anything is sent", func(t *testing.T) {
		for _, args := range [][]string{
			{"pay", "-url", url, "-amount", "0"},
			{"pay", "-url", url, "-order", ""},
			{"pay", "-url", "127.0.0.1:8080"},
			{"pay", "-url", url, "-retries", "-1"},
		} {
			if _, _, err := runCmd(t, args...); err == nil {
				t.Errorf("%v: no error", args)
			}
		}
	})
}

func TestPayCommandRetriesWithOneKey(t *testing.T) {
	var mu sync.Mutex
	var keys []string
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		n := len(keys)
		mu.Unlock()
		if n <= 2 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"charge_id":"ch_1","status":"paid"}`)
	}))
	defer hs.Close()

	out, _, err := runCmd(t, "pay", "-url", hs.URL, "-base", "1ms", "-cap", "2ms")
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 3 || keys[0] != keys[1] || keys[1] != keys[2] {
		t.Fatalf("keys %q, want three attempts with one key", keys)
	}
	lines := regexp.MustCompile(`(?m)^attempt (\d)  key (\S+)  (\d{3})`).FindAllStringSubmatch(out, -1)
	if len(lines) != 3 || lines[0][3] != "503" || lines[1][3] != "503" || lines[2][3] != "201" {
		t.Fatalf("output:\n%s", out)
	}
	if strings.Trim(keys[0], `"`) != lines[0][2] || !strings.Contains(out, "waiting") {
		t.Errorf("key %s, output:\n%s", keys[0], out)
	}
}

func TestSubcommandDispatch(t *testing.T) {
	t.Run("a subcommand name is not a server flag", func(t *testing.T) {
		for _, name := range []string{"backoff", "herd", "pay"} {
			if _, ok := subcommands[name]; !ok {
				t.Errorf("no %s", name)
			}
		}
	})
	t.Run("run dispatches a subcommand instead of starting the server", func(t *testing.T) {
		// An unknown flag makes the subcommand fail at once, before any
		// server could start; the server's own flag set would also fail,
		// but with another usage line.
		err := run(context.Background(), []string{"backoff", "-retries", "31"}, func(string) string { return "" }, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "-retries must be at most 30") {
			t.Errorf("error %v", err)
		}
	})
}

// runMain runs the whole command line as main does, in dir, with env as
// the only PAYTWICE_* variables, and returns what it printed and the exit
// status.
func runMain(t *testing.T, dir string, env map[string]string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	if dir != "" {
		t.Chdir(dir)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // a server that starts after all stops at once
	var out, errOut bytes.Buffer
	err := run(ctx, args, func(name string) string { return env[name] }, &out, &errOut)
	code = exitCode(err, &errOut)
	return out.String(), errOut.String(), code
}

func TestCommandLine(t *testing.T) {
	listsCommands := func(t *testing.T, usage string) {
		t.Helper()
		for name := range subcommands {
			if !regexp.MustCompile(`(?m)^  ` + name + ` +\S`).MatchString(usage) {
				t.Errorf("the usage does not list %s:\n%s", name, usage)
			}
		}
		for _, flag := range []string{"-addr", "-db", "-retention duration", "-lock-timeout duration"} {
			if !strings.Contains(usage, flag) {
				t.Errorf("the usage does not show %s:\n%s", flag, usage)
			}
		}
	}

	t.Run("every command has a line in the usage", func(t *testing.T) {
		for name := range subcommands {
			if commandSummaries[name] == "" {
				t.Errorf("%s has no summary", name)
			}
		}
	})

	t.Run("-h lists the commands and the flags on stdout, as help does, and is not an error", func(t *testing.T) {
		stdout, _, code := runMain(t, t.TempDir(), nil, "-h")
		if code != 0 {
			t.Errorf("exit %d", code)
		}
		listsCommands(t, stdout)
	})

	t.Run("help prints the usage", func(t *testing.T) {
		stdout, _, code := runMain(t, t.TempDir(), nil, "help")
		if code != 0 {
			t.Errorf("exit %d", code)
		}
		listsCommands(t, stdout)
		stdout, _, code = runMain(t, "", nil, "help", "backoff")
		if code != 0 || !strings.Contains(stdout, "usage: paytwice backoff") {
			t.Errorf("help backoff: exit %d\n%s", code, stdout)
		}
	})

	// Every command follows the server's convention: help asked for goes
	// to stdout and exits 0, whichever way it is asked; a wrong command
	// line goes to stderr and exits 2.
	for name := range subcommands {
		t.Run(name+" -h prints what help "+name+" prints, on stdout", func(t *testing.T) {
			want, stderr, code := runMain(t, "", nil, "help", name)
			if code != 0 || stderr != "" || !strings.HasPrefix(want, "usage: paytwice "+name+" [flags]") {
				t.Fatalf("help %s: exit %d, stderr %q, stdout:\n%s", name, code, stderr, want)
			}
			for _, h := range []string{"-h", "-help", "--help"} {
				stdout, stderr, code := runMain(t, "", nil, name, h)
				if code != 0 || stderr != "" || stdout != want {
					t.Errorf("%s %s: exit %d, stderr %q, stdout:\n%s", name, h, code, stderr, stdout)
				}
			}
		})
		t.Run(name+" with a wrong flag prints the usage on stderr and exits 2", func(t *testing.T) {
			stdout, stderr, code := runMain(t, t.TempDir(), nil, name, "-bogus")
			if code != 2 || stdout != "" || !strings.Contains(stderr, "flag provided but not defined: -bogus") ||
				!strings.Contains(stderr, "usage: paytwice "+name+" [flags]") {
				t.Errorf("exit %d, stdout %q, stderr:\n%s", code, stdout, stderr)
			}
		})
	}

	t.Run("check URL -h is help too, a wrong flag after the URL a usage error", func(t *testing.T) {
		stdout, stderr, code := runMain(t, "", nil, "check", "http://127.0.0.1:1/v1/payments", "-h")
		if code != 0 || stderr != "" || !strings.HasPrefix(stdout, "usage: paytwice check") {
			t.Errorf("exit %d, stderr %q, stdout:\n%s", code, stderr, stdout)
		}
		stdout, stderr, code = runMain(t, "", nil, "check", "http://127.0.0.1:1/v1/payments", "-bogus")
		if code != 2 || stdout != "" || !strings.Contains(stderr, "usage: paytwice check") {
			t.Errorf("exit %d, stdout %q, stderr:\n%s", code, stdout, stderr)
		}
	})

	t.Run("an argument a command does not take prints the usage on stderr and exits 2", func(t *testing.T) {
		stdout, stderr, code := runMain(t, "", nil, "backoff", "now")
		if code != 2 || stdout != "" || !strings.Contains(stderr, `unexpected argument "now"`) || !strings.Contains(stderr, "usage: paytwice backoff") {
			t.Errorf("exit %d, stdout %q, stderr:\n%s", code, stdout, stderr)
		}
	})

	// Nothing of these may start the server or create a file.
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"hred"}, `unknown command "hred"; did you mean "herd"?`},
		{[]string{"serve"}, `unknown command "serve"`},
		{[]string{"help", "pya"}, `unknown command "pya"; did you mean "pay"?`},
		{[]string{"help", "pay", "now"}, `unexpected argument "now": help takes one command name`},
		{[]string{"-db", "x.db", "extra"}, `unexpected argument "extra": the server takes only flags`},
		{[]string{"-db", "x.db", "backoff"}, `unexpected argument "backoff": a command comes first`},
		{[]string{"-bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"-retention", "24"}, `invalid value "24" for flag -retention`},
		{[]string{"-lock-timeout", "soon"}, `invalid value "soon" for flag -lock-timeout`},
	} {
		t.Run(strings.Join(tc.args, " ")+" is an error with the usage", func(t *testing.T) {
			dir := t.TempDir()
			stdout, stderr, code := runMain(t, dir, nil, tc.args...)
			if code != 2 || !strings.Contains(stderr, tc.says) || stdout != "" {
				t.Errorf("exit %d, stdout %q, stderr:\n%s", code, stdout, stderr)
			}
			listsCommands(t, stderr)
			if files, _ := os.ReadDir(dir); len(files) > 0 {
				t.Errorf("%d files written", len(files))
			}
		})
	}

	for _, tc := range []struct {
		args []string
		env  map[string]string
		says string
	}{
		{[]string{"-retention", "0s"}, nil, "-retention must be a positive duration such as 30s or 24h, not 0s"},
		{[]string{"-lock-timeout", "-5s"}, nil, "-lock-timeout must be a positive duration"},
		{[]string{"-lock-timeout", "2ns"}, nil, "-lock-timeout must be at least 1s"},
		{nil, map[string]string{"PAYTWICE_LOCK_TIMEOUT": "500ms"}, "-lock-timeout must be at least 1s (a held request renews its key's lease every third of it), not 500ms"},
		{nil, map[string]string{"PAYTWICE_RETENTION": "1 day"}, `PAYTWICE_RETENTION must be a positive duration such as 30s or 24h, not "1 day"`},
		{nil, map[string]string{"PAYTWICE_SYNCHRONOUS": "sometimes"}, `-synchronous must be FULL, EXTRA, NORMAL or OFF, not "sometimes"`},
	} {
		t.Run(fmt.Sprint(tc.args, tc.env)+" is refused before anything is written", func(t *testing.T) {
			dir := t.TempDir()
			_, stderr, code := runMain(t, dir, tc.env, tc.args...)
			if code != 2 || !strings.Contains(stderr, tc.says) {
				t.Errorf("exit %d, stderr:\n%s", code, stderr)
			}
			if files, _ := os.ReadDir(dir); len(files) > 0 {
				t.Errorf("%d files written", len(files))
			}
		})
	}

	t.Run("a port in use names -addr and PAYTWICE_ADDR and writes nothing", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		dir := t.TempDir()
		// A flag on the command line wins over a wrong variable: the run
		// gets as far as listening.
		env := map[string]string{"PAYTWICE_ADDR": ln.Addr().String(), "PAYTWICE_LOCK_TIMEOUT": "never"}
		_, stderr, code := runMain(t, dir, env, "-db", "class.db", "-lock-timeout", "1m")
		if code != 1 || !strings.Contains(stderr, "already in use") || !strings.Contains(stderr, "-addr") || !strings.Contains(stderr, "PAYTWICE_ADDR") {
			t.Errorf("exit %d, stderr:\n%s", code, stderr)
		}
		if files, _ := os.ReadDir(dir); len(files) > 0 {
			t.Errorf("%d files written: the databases were opened before the listen failed", len(files))
		}
	})

	t.Run("the binary exits 2 for a wrong command line, a bad flag value included, 0 for -h", func(t *testing.T) {
		bin := binary(t)
		for args, want := range map[string]int{"hred": 2, "-h": 0, "help": 0, "pay -h": 0, "help pay": 0, "pay -amount 0": 2, "backoff -bogus": 2, "-retention 0s": 2,
			"-synchronous fast": 2, "cluster": 2} {
			cmd := exec.Command(bin, strings.Fields(args)...)
			cmd.Dir = t.TempDir()
			out, err := cmd.CombinedOutput()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != want {
				t.Errorf("paytwice %s: exit %d, want %d\n%s", args, code, want, out)
			}
		}
	})
}

func TestUsageNeverPrintsASecret(t *testing.T) {
	t.Setenv("PAYTWICE_DB", "postgres://u:hunter2@127.0.0.1:5432/paytwice")
	t.Setenv("PAYTWICE_PRESENTER_TOKEN", "s3cret")
	env := map[string]string{"PAYTWICE_DB": "postgres://u:hunter2@127.0.0.1:5432/paytwice", "PAYTWICE_PRESENTER_TOKEN": "s3cret"}
	for _, args := range [][]string{{"-h"}, {"help"}, {"help", "cluster"}, {"cluster", "-h"}} {
		out, errOut, _ := runMain(t, "", env, args...)
		all := out + errOut
		if strings.Contains(all, "hunter2") || strings.Contains(all, "s3cret") {
			t.Errorf("%v printed a secret:\n%s", args, all)
		}
		if !strings.Contains(all, "-db") {
			t.Errorf("%v printed no flags:\n%s", args, all)
		}
	}
}

func TestClusterReadsTheServersEnvironment(t *testing.T) {
	t.Setenv("PAYTWICE_LOCK_TIMEOUT", "45s")
	t.Setenv("PAYTWICE_RETENTION", "2h")
	t.Setenv("PAYTWICE_ADDR", "127.0.0.1:9099")
	usage, _, _ := runMain(t, "", nil, "cluster", "-h")
	for _, want := range []string{"(default 45s)", "(default 2h0m0s)", `(default "127.0.0.1:9099")`} {
		if !strings.Contains(usage, want) {
			t.Errorf("cluster -h lacks %s:\n%s", want, usage)
		}
	}
	t.Setenv("PAYTWICE_LOCK_TIMEOUT", "soon")
	if _, _, err := runCmd(t, "cluster", "-db", "postgres://127.0.0.1:1/x"); err == nil || !strings.Contains(err.Error(), "PAYTWICE_LOCK_TIMEOUT") {
		t.Errorf("a bad PAYTWICE_LOCK_TIMEOUT: %v", err)
	}
}

package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestServerHoldsItsTimerSlack runs the built server and reads the timer
// slack its process holds from /proc: the server replaces itself to take
// it, so the pid the test started is the one that holds it.
func TestServerHoldsItsTimerSlack(t *testing.T) {
	bin := binary(t)
	inherited := readTimerSlack(t, os.Getpid())
	for _, c := range []struct {
		gomaxprocs string
		flags      []string
		want       int64
		line       string
		// replaced: the process replaced itself, as its first
		// environment (which /proc keeps) shows: the slack a thread holds
		// is then every thread's, the runtime's own among them.
		replaced bool
	}{
		{"1", nil, 4_000_000, "timer slack: 4ms, auto at GOMAXPROCS=1 (", true},
		{"2", nil, inherited, "timer slack: " + time.Duration(inherited).String() + ", as the server was started with (auto at GOMAXPROCS=2: it is for a server on one P)\n", false},
		{"2", []string{"-timer-slack", "2ms"}, 2_000_000, "timer slack: 2ms, -timer-slack\n", true},
		{"1", []string{"-timer-slack", "off"}, inherited, "timer slack: " + time.Duration(inherited).String() + ", as the server was started with (-timer-slack off)\n", false},
	} {
		t.Run("GOMAXPROCS="+c.gomaxprocs+" "+strings.Join(c.flags, " "), func(t *testing.T) {
			t.Setenv("GOMAXPROCS", c.gomaxprocs)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			p := startServer(ctx, t, bin, filepath.Join(t.TempDir(), "paytwice.db"), c.flags...)
			if got := readTimerSlack(t, p.cmd.Process.Pid); got != c.want {
				t.Errorf("the server's process holds a timer slack of %d ns, want %d", got, c.want)
			}
			environ, err := os.ReadFile("/proc/" + strconv.Itoa(p.cmd.Process.Pid) + "/environ")
			if err != nil {
				t.Fatal(err)
			}
			if replaced := strings.Contains("\x00"+string(environ), "\x00"+timerSlackExecVariable+"=1\x00"); replaced != c.replaced {
				t.Errorf("the server replaced itself: %v, want %v", replaced, c.replaced)
			}
			if out := p.stdout.String(); !strings.Contains(out, c.line) {
				t.Errorf("the server's log:\n%s\nwant a line with %q", out, c.line)
			}
			// It serves as it does without: the exec kept its listener.
			resp, err := p.client.Get(p.url + "/")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Errorf("GET /: %s", resp.Status)
			}
		})
	}
}

func readTimerSlack(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/timerslack_ns")
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"paytwice/pay/proxy"
)

// lockedBuffer is a bytes.Buffer a command writes while a test reads.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

var proxyAddrLine = regexp.MustCompile(`point your client at (http://127\.0\.0\.1:\d+);`)

// startProxyCmd runs paytwice proxy with args on a free port, and returns
// its address once it is ready, and what ends it.
func startProxyCmd(t *testing.T, ctx context.Context, args ...string) (addr string, out *lockedBuffer, done <-chan error) {
	t.Helper()
	out = &lockedBuffer{}
	errc := make(chan error, 1)
	go func() {
		errc <- runProxy(ctx, append([]string{"-addr", "127.0.0.1:0"}, args...), out, out)
	}()
	for range 200 { // bounded: 10 s
		if m := proxyAddrLine.FindStringSubmatch(out.String()); m != nil {
			return m[1], out, errc
		}
		select {
		case err := <-errc:
			t.Fatalf("the proxy ended before it was ready: %v\n%s", err, out.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatalf("the proxy never said where it listens:\n%s", out.String())
	return "", nil, nil
}

func waitProxyCmd(t *testing.T, done <-chan error, out *lockedBuffer) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatalf("the proxy did not end:\n%s", out.String())
		return nil
	}
}

func TestProxyCommand(t *testing.T) {
	t.Run("alone, it runs its own paytwice; after -actions it grades, writes the report and JUnit, and exits 0", func(t *testing.T) {
		dir := t.TempDir()
		reportFile, junitFile := filepath.Join(dir, "report.json"), filepath.Join(dir, "junit.xml")
		addr, out, done := startProxyCmd(t, context.Background(), "-actions", "3", "-faults", "lost,halfway,422", "-report", reportFile, "-junit", junitFile)
		for _, order := range []string{"CMD-1", "CMD-2", "CMD-3"} {
			runCmd(t, "pay", "-url", addr, "-order", order, "-base", "20ms", "-cap", "100ms", "-budget", "5s")
		}
		if err := waitProxyCmd(t, done, out); err != nil {
			t.Fatalf("exit %v:\n%s", exitCode(err, &bytes.Buffer{}), out.String())
		}
		if !strings.Contains(out.String(), "run ended: 3 actions are over") || !strings.Contains(out.String(), "no rule broken") {
			t.Fatalf("output:\n%s", out.String())
		}
		b, err := os.ReadFile(reportFile)
		if err != nil {
			t.Fatal(err)
		}
		var rep proxy.Report
		if err := json.Unmarshal(b, &rep); err != nil {
			t.Fatal(err)
		}
		if rep.Broken || len(rep.Clients) != 1 || len(rep.Clients[0].Actions) != 3 || rep.RetentionSeconds != 86400 {
			t.Fatalf("report: %s", b)
		}
		lost := rep.Clients[0].Actions[0]
		if lost.Fault != proxy.Lost || lost.Charges == nil || *lost.Charges != 1 {
			t.Fatalf("the lost response's action: %+v", lost)
		}
		junit, err := os.ReadFile(junitFile)
		if err != nil || !strings.Contains(string(junit), `tests="10" failures="0"`) {
			t.Fatalf("junit (%v):\n%s", err, junit)
		}
	})

	t.Run("a client that sends no key breaks rule 1: exit status 1", func(t *testing.T) {
		addr, out, done := startProxyCmd(t, context.Background(), "-actions", "1", "-faults", "none")
		res, err := http.Post(addr+"/v1/payments", "application/json", strings.NewReader(`{"order_id":"NOKEY-1","amount_satang":100}`))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		err = waitProxyCmd(t, done, out)
		if code := exitCode(err, &bytes.Buffer{}); code != 1 || !strings.Contains(out.String(), "key-on-every-post              broken") {
			t.Fatalf("exit %d:\n%s", code, out.String())
		}
	})

	t.Run("SIGINT ends the run and prints the grades", func(t *testing.T) {
		addr, out, done := startProxyCmd(t, context.Background())
		runCmd(t, "pay", "-url", addr, "-order", "SIG-1", "-base", "20ms", "-cap", "100ms", "-budget", "5s")
		if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		err := waitProxyCmd(t, done, out)
		if err != nil || !strings.Contains(out.String(), "run ended: interrupted") || !strings.Contains(out.String(), "client 127.0.0.1 Go-http-client/1.1: 1 actions") {
			t.Fatalf("error %v:\n%s", err, out.String())
		}
	})

	t.Run("usage errors exit 2", func(t *testing.T) {
		for _, args := range [][]string{
			{"proxy", "-faults", "lost,explode"},
			{"proxy", "-random", "1.5"},
			{"proxy", "-target", "ftp://example"},
			{"proxy", "-budget", "0s"},
			{"proxy", "stray"},
		} {
			_, stderr, code := runMain(t, "", nil, args...)
			if code != 2 {
				t.Errorf("%v: exit %d, stderr:\n%s", args, code, stderr)
			}
		}
	})
}

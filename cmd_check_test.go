package main

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// runBinary runs the built paytwice with args and returns its output and
// exit status.
func runBinary(t *testing.T, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary(t), args...).CombinedOutput()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	case err != nil:
		t.Fatalf("paytwice %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), 0
}

// TestCheckCommand runs "paytwice check", as a process of its own,
// against the real binary serving on a fresh SQLite file: every case
// passes, then, with a lab mistake switched on, it exits 1 naming it.
func TestCheckCommand(t *testing.T) {
	url := payServer(t)
	dir := t.TempDir()
	countFlags := []string{"-count-url", url + "/v1/payments?order_id={{id}}", "-count-field", "charges", "-other-auth", "Bearer second"}

	t.Run("paytwice passes and the command exits 0", func(t *testing.T) {
		junit := filepath.Join(dir, "report.xml")
		args := append([]string{"check", "-junit", junit, "-history", filepath.Join(dir, "good.jsonl")}, countFlags...)
		out, code := runBinary(t, append(args, url+"/v1/payments")...)
		headline, _, _ := strings.Cut(out, "\n")
		if code != 0 || !strings.HasPrefix(headline, "paytwice check: ") || !strings.Contains(headline, " 0 FAIL, ") ||
			!strings.HasSuffix(headline, "(oracle: count-url) — exit 0") || !strings.Contains(out, "linearizable against the model") {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		b, err := os.ReadFile(junit)
		var suite struct {
			Tests    int `xml:"tests,attr"`
			Failures int `xml:"failures,attr"`
			Cases    []struct {
				Name string `xml:"name,attr"`
				Time string `xml:"time,attr"`
			} `xml:"testcase"`
		}
		if err != nil || xml.Unmarshal(b, &suite) != nil || suite.Tests != 20 || suite.Failures != 0 {
			t.Fatalf("JUnit report %+v (%v):\n%s", suite, err, b)
		}
		if last := suite.Cases[len(suite.Cases)-1]; last.Name != "history linearizable" || last.Time == "" {
			t.Errorf("the history's test case: %+v", last)
		}
		if out, code := runBinary(t, "check", "-verify", filepath.Join(dir, "good.jsonl")); code != 0 || !strings.Contains(out, "linearizable") {
			t.Fatalf("-verify: exit %d:\n%s", code, out)
		}
	})

	t.Run("a lab mistake fails its case and the command exits 1", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodPatch, url+"/api/lab", strings.NewReader(`{"server":{"mode":"check_then_insert"}}`))
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("switching the lab: %v %v", err, res)
		}
		res.Body.Close()
		hist := filepath.Join(dir, "bad.jsonl")
		args := append([]string{"check", "-cases", "1,4", "-history", hist}, countFlags...)
		out, code := runBinary(t, append(args, url+"/v1/payments")...)
		if code != 1 || !strings.Contains(out, "storm of one key            FAIL (safety)") || !strings.Contains(out, "NOT linearizable") {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		out, code = runBinary(t, "check", "-verify", hist)
		if code != 1 || !strings.Contains(out, "NOT linearizable") {
			t.Fatalf("-verify: exit %d:\n%s", code, out)
		}
		if _, err := os.Stat(filepath.Join(dir, "bad.html")); err != nil {
			t.Fatalf("no visualization next to the history: %v\n%s", err, out)
		}
	})

	t.Run("usage errors and an endpoint that cannot be reached exit 2", func(t *testing.T) {
		for _, args := range [][]string{
			{"check"},
			{"check", "-c", "1", url + "/v1/payments"},
			{"check", "-body", `{"order_id":"fixed"}`, url + "/v1/payments"},
			{"check", url + "/v1/payments", "another"},
			{"check", "-verify", filepath.Join(dir, "missing.jsonl")},
			{"check", "http://127.0.0.1:1/v1/payments"},
			// Reached, but nothing can be tested: an oracle that cannot
			// count, an endpoint that does not take a payment.
			{"check", "-count-url", url + "/v1/payments?order_id={{id}}", "-count-field", "chargez", url + "/v1/payments"},
			{"check", url + "/v1/no-such-path"},
		} {
			if out, code := runBinary(t, args...); code != 2 {
				t.Errorf("paytwice %s: exit %d, want 2:\n%s", strings.Join(args, " "), code, out)
			}
		}
	})

	t.Run("-json prints the report as JSON", func(t *testing.T) {
		args := append([]string{"check", "-json", "-cases", "1,6"}, countFlags...)
		out, code := runBinary(t, append(args, url+"/v1/payments")...)
		var rep struct {
			Schema  string `json:"schema"`
			Summary struct {
				Pass, Fail, Exit int
				Line             string
			} `json:"summary"`
			Results []struct {
				Case    int    `json:"case"`
				Verdict string `json:"verdict"`
			} `json:"results"`
			History struct {
				Result string `json:"result"`
			} `json:"history"`
		}
		if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || len(rep.Results) != 2 || rep.Results[0].Verdict != "PASS" || rep.History.Result != "ok" ||
			rep.Schema != "paytwice-check/2" || rep.Summary.Pass != 3 || rep.Summary.Exit != 0 || !strings.HasPrefix(rep.Summary.Line, "paytwice check: 3 PASS, 0 DIFFERS, 0 FAIL, 0 SKIP") {
			t.Fatalf("exit %d: %+v\n%s", code, rep, out)
		}
	})

	t.Run("help check prints its flags", func(t *testing.T) {
		out, code := runBinary(t, "help", "check")
		if code != 0 || !strings.Contains(out, "-count-url") || !strings.Contains(out, "Exit status") {
			t.Fatalf("exit %d:\n%s", code, out)
		}
	})
}

package web

import (
	"encoding/json"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"paytwice/sim/report"
	"paytwice/static"
)

func TestBackoffAPIReproducesTheWorkedExample(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, Config{})
	paths := []string{
		"/api/backoff?base=0.5&cap=8&retries=5&strategy=full&clients=1000&seed=1",
		"/api/backoff", // the defaults are the article's example
	}
	for _, path := range paths {
		t.Run(path+" gives the article's table and totals", func(t *testing.T) {
			res := env.get(path)
			if res.Status != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") {
				t.Fatalf("status %d, type %q: %s", res.Status, res.Header.Get("Content-Type"), res.Body)
			}
			var rep report.Backoff
			if err := json.Unmarshal(res.Body, &rep); err != nil {
				t.Fatal(err)
			}
			want := []report.BackoffRow{
				{Retry: 1, N: 0, CeilingSeconds: 0.5, MinSeconds: 0, MaxSeconds: 0.5, MeanSeconds: 0.25},
				{Retry: 2, N: 1, CeilingSeconds: 1, MinSeconds: 0, MaxSeconds: 1, MeanSeconds: 0.5},
				{Retry: 3, N: 2, CeilingSeconds: 2, MinSeconds: 0, MaxSeconds: 2, MeanSeconds: 1},
				{Retry: 4, N: 3, CeilingSeconds: 4, MinSeconds: 0, MaxSeconds: 4, MeanSeconds: 2},
				{Retry: 5, N: 4, CeilingSeconds: 8, MinSeconds: 0, MaxSeconds: 8, MeanSeconds: 4, HitsCap: true},
			}
			if len(rep.Schedule) != len(want) {
				t.Fatalf("%d rows, want 5: %+v", len(rep.Schedule), rep.Schedule)
			}
			for i, row := range rep.Schedule {
				if row != want[i] {
					t.Errorf("row %d is %+v, want %+v", i+1, row, want[i])
				}
			}
			if rep.Totals.WorstSeconds != 15.5 || rep.Totals.MeanSeconds != 7.75 {
				t.Errorf("totals %+v, want worst 15.5 s and mean 7.75 s", rep.Totals)
			}
			s := rep.Spread
			if s.Clients != 1000 || s.FirstRoundPerMs != 2 || s.FirstRoundFromSeconds != 0 || s.FirstRoundWindowSeconds != 0.5 {
				t.Errorf("spread %+v, want 1,000 clients at 2 per ms over 0-0.5 s", s)
			}
			if s.Requests != 5000 || len(s.Bins) == 0 || len(s.FirstRoundBins) == 0 || s.PeakCount < 2 {
				t.Errorf("spread %d requests, peak %d, %d bins", s.Requests, s.PeakCount, len(s.Bins))
			}
			byName := map[string]report.BackoffCompare{}
			for _, c := range rep.Compare {
				byName[string(c.Strategy)] = c
			}
			if len(byName) != 5 {
				t.Fatalf("compare has %d strategies", len(byName))
			}
			if none := byName["none"]; none.FirstRoundPeakCount != 1000 || none.FirstRoundPerMs != 1000 {
				t.Errorf("without jitter all 1,000 should land in one millisecond: %+v", none)
			}
			if exp := byName["exponential"]; exp.FirstRoundPeakCount != 1000 || exp.FirstRoundFromSeconds != 0.5 {
				t.Errorf("exponential without jitter should put all 1,000 at 0.5 s: %+v", exp)
			}
		})
	}

	t.Run("durations are seconds as JSON numbers, not nanoseconds", func(t *testing.T) {
		var raw map[string]any
		if err := json.Unmarshal(env.get("/api/backoff").Body, &raw); err != nil {
			t.Fatal(err)
		}
		params := raw["params"].(map[string]any)
		if params["base_seconds"] != 0.5 || params["cap_seconds"] != 8.0 {
			t.Errorf("params %v", params)
		}
		row := raw["schedule"].([]any)[0].(map[string]any)
		if row["ceiling_seconds"] != 0.5 || row["mean_seconds"] != 0.25 {
			t.Errorf("first row %v", row)
		}
		if raw["totals"].(map[string]any)["worst_seconds"] != 15.5 {
			t.Errorf("totals %v", raw["totals"])
		}
	})

	t.Run("the same query gives the same numbers", func(t *testing.T) {
		a := env.get("/api/backoff?seed=42&strategy=equal")
		b := env.get("/api/backoff?seed=42&strategy=equal")
		if string(a.Body) != string(b.Body) {
			t.Error("two identical requests gave different answers")
		}
	})

	t.Run("strategy names ignore case", func(t *testing.T) {
		if res := env.get("/api/backoff?strategy=Full"); res.Status != 200 {
			t.Errorf("status %d: %s", res.Status, res.Body)
		}
	})
}

// badBackoffParams are wrong queries and the field each must be blamed on.
var badBackoffParams = []struct {
	name, query, field, says string
}{
	{"a negative base", "base=-1", "base", "negative"},
	{"a zero base", "base=0", "base", "at least"},
	{"a base that is not a number", "base=abc", "base", "not a number"},
	{"an empty base", "base=", "base", "enter"},
	{"NaN as the base", "base=NaN", "base", "not a number"},
	{"a negative cap", "cap=-8", "cap", "negative"},
	{"a cap below the base", "base=2&cap=1", "cap", "at least the base"},
	{"a cap beyond a day", "cap=100000", "cap", "at most"},
	{"negative retries", "retries=-1", "retries", "negative"},
	{"retries beyond the bound", "retries=31", "retries", "at most 30"},
	{"fractional retries", "retries=2.5", "retries", "whole number"},
	{"retries that overflow", "retries=99999999999999999999", "retries", "at most"},
	{"an unknown strategy", "strategy=random", "strategy", "unknown strategy"},
	{"zero clients", "clients=0", "clients", "at least 1"},
	{"clients beyond the bound", "clients=10001", "clients", "at most 10,000"},
	{"clients that are not a number", "clients=many", "clients", "not a number"},
	{"a negative seed", "seed=-3", "seed", "negative"},
	{"a seed that is not a number", "seed=x", "seed", "whole number"},
}

func TestBackoffBadParameters(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, Config{})
	for _, tt := range badBackoffParams {
		t.Run("the API answers "+tt.name+" with a 400 naming "+tt.field, func(t *testing.T) {
			res := env.get("/api/backoff?" + tt.query)
			if res.Status != 400 || res.Header.Get("Content-Type") != "application/problem+json" {
				t.Fatalf("status %d, type %q: %s", res.Status, res.Header.Get("Content-Type"), res.Body)
			}
			p := res.JSON(t)
			detail, _ := p["detail"].(string)
			if !strings.Contains(detail, tt.field+":") || !strings.Contains(detail, tt.says) {
				t.Errorf("detail %q should name %q and say %q", detail, tt.field, tt.says)
			}
			if p["status"] != 400.0 || !strings.HasSuffix(p["type"].(string), "/problems/invalid-request") {
				t.Errorf("problem %v", p)
			}
		})
		t.Run("the page answers "+tt.name+" with a 400 and the message next to "+tt.field, func(t *testing.T) {
			res := env.get("/backoff?"+tt.query, "Accept", "text/html")
			if res.Status != 400 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") {
				t.Fatalf("status %d, type %q", res.Status, res.Header.Get("Content-Type"))
			}
			msg := fieldMessage(t, string(res.Body), tt.field)
			if !strings.Contains(msg, tt.says) {
				t.Errorf("the message next to %s is %q, want it to say %q", tt.field, msg, tt.says)
			}
			if !strings.Contains(string(res.Body), "cannot be computed") {
				t.Error("the results panel does not say the settings are wrong")
			}
		})
		t.Run("the fragment answers "+tt.name+" with a 400 and the message swapped next to "+tt.field, func(t *testing.T) {
			res := env.get("/backoff/results?"+tt.query, "HX-Request", "true")
			if res.Status != 400 {
				t.Fatalf("status %d", res.Status)
			}
			body := string(res.Body)
			if strings.Contains(body, "<html") {
				t.Error("the fragment is a whole page")
			}
			if msg := fieldMessage(t, body, tt.field); !strings.Contains(msg, tt.says) {
				t.Errorf("message %q, want it to say %q", msg, tt.says)
			}
			if !strings.Contains(body, `id="`+tt.field+`-error" hx-swap-oob="true"`) {
				t.Error("the message is not swapped out of band")
			}
		})
	}

	t.Run("every wrong field is reported at once, in form order", func(t *testing.T) {
		res := env.get("/api/backoff?seed=-1&cap=0.1&retries=x")
		detail := res.JSON(t)["detail"].(string)
		c, r, s := strings.Index(detail, "cap:"), strings.Index(detail, "retries:"), strings.Index(detail, "seed:")
		if c < 0 || r < 0 || s < 0 || !(c < r && r < s) {
			t.Errorf("detail %q", detail)
		}
	})
}

// fieldMessage returns the text of a field's message slot in a page or
// fragment.
func fieldMessage(t *testing.T, body, field string) string {
	t.Helper()
	re := regexp.MustCompile(`<p class="field-error" id="` + regexp.QuoteMeta(field) + `-error"[^>]*>([^<]*)</p>`)
	m := re.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no message slot for %s in %s", field, body)
	}
	return htmlUnescape(m[1])
}

func htmlUnescape(s string) string {
	return strings.NewReplacer("&#34;", `"`, "&quot;", `"`, "&#39;", "'", "&amp;", "&", "&lt;", "<", "&gt;", ">").Replace(s)
}

func TestBackoffPage(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, Config{})

	t.Run("the default page shows the article's numbers and says which retry is n = 0", func(t *testing.T) {
		res := env.get("/backoff", "Accept", "text/html")
		if res.Status != 200 {
			t.Fatalf("status %d", res.Status)
		}
		body := string(res.Body)
		for _, want := range []string{
			"15.5 s", "7.75 s", "2 requests per millisecond", "<strong>n = 0</strong>",
			`hx-get="/backoff/results"`, `hx-trigger="input changed delay:300ms, change, submit"`,
			`<svg class="chart" id="first-round"`, `<svg class="chart" id="all-rounds"`,
			`href="` + static.Path("charts.css") + `"`, `name="htmx-config"`,
		} {
			if !strings.Contains(body, want) {
				t.Errorf("the page lacks %q", want)
			}
		}
		if n := strings.Count(body, "<tr>"); n < 6 {
			t.Errorf("%d table rows", n)
		}
	})

	t.Run("the page keeps strict CSP: no inline script or style", func(t *testing.T) {
		body := string(env.get("/backoff", "Accept", "text/html").Body)
		body += string(env.get("/backoff?strategy=none", "Accept", "text/html").Body)
		for _, bad := range []string{"<style", " style=", "<script>", "javascript:", " onclick=", "hx-on"} {
			if strings.Contains(body, bad) {
				t.Errorf("the page contains %q", bad)
			}
		}
		if csp := env.get("/backoff").Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
			t.Errorf("CSP %q", csp)
		}
	})

	t.Run("the fragment keeps the address bar in step with the form", func(t *testing.T) {
		res := env.get("/backoff/results?base=0.5&cap=4&retries=5&strategy=full&clients=1000&seed=1", "HX-Request", "true")
		if res.Status != 200 {
			t.Fatalf("status %d", res.Status)
		}
		u, err := url.Parse(res.Header.Get("HX-Replace-Url"))
		if err != nil || u.Path != "/backoff" || u.Query().Get("cap") != "4" {
			t.Errorf("HX-Replace-Url %q", res.Header.Get("HX-Replace-Url"))
		}
		body := string(res.Body)
		if !strings.Contains(body, "11.5 s") || strings.Contains(body, "<html") {
			t.Errorf("fragment %s", body)
		}
		// Every message slot comes back, empty, so old messages go away.
		if n := strings.Count(body, `hx-swap-oob="true"></p>`); n != 6 {
			t.Errorf("%d empty out-of-band message slots, want 6", n)
		}
	})

	t.Run("the htmx configuration swaps 400 answers and nothing else new", func(t *testing.T) {
		body := string(env.get("/backoff").Body)
		re := regexp.MustCompile(`<meta name="htmx-config" content="([^"]*)">`)
		m := re.FindStringSubmatch(body)
		if m == nil {
			t.Fatal("no htmx-config meta tag")
		}
		var cfg struct {
			IncludeIndicatorStyles bool `json:"includeIndicatorStyles"`
			ResponseHandling       []struct {
				Code  string `json:"code"`
				Swap  bool   `json:"swap"`
				Error *bool  `json:"error"`
			} `json:"responseHandling"`
		}
		if err := json.Unmarshal([]byte(htmlUnescape(m[1])), &cfg); err != nil {
			t.Fatalf("htmx-config %q: %v", m[1], err)
		}
		swaps := func(code string) bool {
			for _, r := range cfg.ResponseHandling {
				if regexp.MustCompile("^" + r.Code + "$").MatchString(code) {
					return r.Swap
				}
			}
			return false
		}
		for code, want := range map[string]bool{"200": true, "204": false, "400": true, "404": false, "422": false, "500": false, "503": true} {
			if swaps(code) != want {
				t.Errorf("a %s is swapped: %v, want %v", code, swaps(code), want)
			}
		}
		if cfg.IncludeIndicatorStyles {
			t.Error("htmx would inline a style element, which the CSP blocks")
		}
	})

	t.Run("other strategies render, decorrelated with its clamping note", func(t *testing.T) {
		for _, st := range []string{"none", "exponential", "equal", "decorrelated"} {
			res := env.get("/backoff?retries=8&strategy="+st, "Accept", "text/html")
			if res.Status != 200 {
				t.Errorf("%s: status %d", st, res.Status)
			}
			if st == "decorrelated" && !strings.Contains(string(res.Body), "cut to exactly the cap") {
				t.Error("no clamping note for decorrelated jitter")
			}
		}
	})

	t.Run("zero retries is a valid policy with nothing to wait for", func(t *testing.T) {
		res := env.get("/backoff?retries=0", "Accept", "text/html")
		if res.Status != 200 || !strings.Contains(string(res.Body), "No retries") {
			t.Errorf("status %d", res.Status)
		}
		var rep report.Backoff
		if err := json.Unmarshal(env.get("/api/backoff?retries=0").Body, &rep); err != nil {
			t.Fatal(err)
		}
		if len(rep.Schedule) != 0 || rep.Spread.Bins == nil || rep.Totals.WorstSeconds != 0 {
			t.Errorf("report %+v", rep)
		}
	})
}

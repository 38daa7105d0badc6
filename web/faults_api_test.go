package web

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"

	"paytwice/pay"
	"paytwice/web/live"
)

func getFaults(t *testing.T, env *fiEnv) pay.Faults {
	t.Helper()
	r := env.must(http.MethodGet, "/api/faults", "")
	if r.Status != http.StatusOK {
		t.Fatalf("GET /api/faults: %d %s", r.Status, r.Body)
	}
	var f pay.Faults
	if err := json.Unmarshal(r.Body, &f); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestFaultAPI(t *testing.T) {
	t.Parallel()
	t.Run("GET shows every switch, off, under server, gateway and random", func(t *testing.T) {
		env := newFIEnv(t, Config{})
		r := env.must(http.MethodGet, "/api/faults", "")
		var raw map[string]map[string]any
		if err := json.Unmarshal(r.Body, &raw); err != nil {
			t.Fatalf("%s: %v", r.Body, err)
		}
		// The delays, random mode, and every on/off switch of the table
		// the pages draw.
		want := map[string][]string{
			"server":  {"delay_ms"},
			"gateway": {"latency_ms"},
			"random":  {"enabled", "probability", "seed"},
		}
		for _, sw := range pay.FaultSwitches {
			section, name, _ := strings.Cut(sw.Field, ".")
			want[section] = append(want[section], name)
		}
		for _, fields := range want {
			slices.Sort(fields)
		}
		if len(raw) != len(want) {
			t.Fatalf("sections %v", raw)
		}
		for section, fields := range want {
			var got []string
			for f, v := range raw[section] {
				got = append(got, f)
				if v != false && v != float64(0) {
					t.Errorf("%s.%s is %v at start, want off", section, f, v)
				}
			}
			slices.Sort(got)
			if strings.Join(got, ",") != strings.Join(fields, ",") {
				t.Errorf("%s has %v, want %v", section, got, fields)
			}
		}
	})

	t.Run("PUT replaces every switch: the ones it leaves out are turned off", func(t *testing.T) {
		env := newFIEnv(t, Config{})
		env.setFaults(`{"server":{"delay_ms":800,"fail_halfway":true},"random":{"enabled":true,"seed":3,"probability":0.5}}`)
		env.setFaults(`{"gateway":{"decline":true}}`)
		want := pay.Faults{Gateway: pay.GatewayFaults{Decline: true}}
		if got := getFaults(t, env); got != want {
			t.Fatalf("got %+v, want %+v", got, want)
		}
	})

	t.Run("PATCH changes only the fields it names", func(t *testing.T) {
		env := newFIEnv(t, Config{})
		env.setFaults(`{"gateway":{"decline":true,"latency_ms":200},"random":{"seed":9,"probability":0.25}}`)
		r := env.must(http.MethodPatch, "/api/faults", `{"server":{"delay_ms":800},"random":{"enabled":true}}`)
		if r.Status != http.StatusOK {
			t.Fatalf("PATCH: %d %s", r.Status, r.Body)
		}
		want := pay.Faults{
			Server:  pay.ServerFaults{DelayMS: 800},
			Gateway: pay.GatewayFaults{Decline: true, LatencyMS: 200},
			Random:  pay.RandomFaults{Enabled: true, Seed: 9, Probability: 0.25},
		}
		var echoed pay.Faults
		_ = json.Unmarshal(r.Body, &echoed)
		if got := getFaults(t, env); got != want || echoed != want {
			t.Fatalf("got %+v (answered %+v), want %+v", got, echoed, want)
		}
	})

	t.Run("every change is published on the timeline, saying what changed", func(t *testing.T) {
		env := newFIEnv(t, Config{})
		before := env.Server.hub.LastSeq()
		env.must(http.MethodPatch, "/api/faults", `{"server":{"delay_ms":800},"gateway":{"timeout":true}}`)
		env.must(http.MethodPatch, "/api/faults", `{"server":{"delay_ms":800}}`) // no change: no event
		var switched []string
		for _, e := range env.Server.hub.Recent(50) {
			if e.Seq > before && e.Kind == live.Switched {
				switched = append(switched, e.Message)
			}
		}
		if len(switched) != 1 || !strings.Contains(switched[0], "server.delay_ms 0 → 800 ms") || !strings.Contains(switched[0], "gateway.timeout on") {
			t.Fatalf("switched events %q", switched)
		}
	})

	bad := []struct {
		name, method, body, contentType string
		status                          int
		mention                         string
	}{
		{"an unknown field is refused, naming it", "PUT", `{"server":{"delay":5}}`, "", 400, `"delay"`},
		{"an unknown section is refused, naming it", "PATCH", `{"client":{}}`, "", 400, `"client"`},
		{"a string where a number belongs is refused, naming the field", "PATCH", `{"server":{"delay_ms":"800"}}`, "", 400, "server.delay_ms"},
		{"a fraction of a millisecond is refused, naming the field", "PUT", `{"server":{"delay_ms":1.5}}`, "", 400, "server.delay_ms"},
		{"a string where true or false belongs is refused, naming the field", "PATCH", `{"gateway":{"decline":"yes"}}`, "", 400, "gateway.decline"},
		{"a delay over ten seconds is refused", "PATCH", `{"server":{"delay_ms":10001}}`, "", 400, "server.delay_ms"},
		{"a negative delay is refused", "PUT", `{"server":{"delay_ms":-1}}`, "", 400, "server.delay_ms"},
		{"a gateway latency over ten seconds is refused", "PATCH", `{"gateway":{"latency_ms":20000}}`, "", 400, "gateway.latency_ms"},
		{"a probability above 1 is refused", "PATCH", `{"random":{"enabled":true,"probability":1.5}}`, "", 400, "random.probability"},
		{"a negative probability is refused", "PUT", `{"random":{"probability":-0.1}}`, "", 400, "random.probability"},
		{"a fractional seed is refused", "PATCH", `{"random":{"seed":0.5}}`, "", 400, "random.seed"},
		{"a section that is not an object is refused", "PATCH", `{"server":true}`, "", 400, "server"},
		{"an array body is refused", "PUT", `[]`, "", 400, "object"},
		{"data after the object is refused", "PUT", `{} {}`, "", 400, "after"},
		{"broken JSON is refused", "PATCH", `{"server":`, "", 400, "JSON"},
		{"an empty body is refused", "PUT", ` `, "", 400, "empty"},
		{"a form body is refused as the wrong media type", "PUT", `server=1`, "application/x-www-form-urlencoded", 415, "application/json"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			env := newFIEnv(t, Config{})
			env.setFaults(`{"gateway":{"decline":true}}`)
			before := getFaults(t, env)
			var headers []string
			if tc.contentType != "" {
				headers = []string{"Content-Type", tc.contentType}
			}
			r := env.must(tc.method, "/api/faults", tc.body, headers...)
			if r.Status != tc.status {
				t.Fatalf("got %d %s, want %d", r.Status, r.Body, tc.status)
			}
			problemSlug(t, r)
			var p Problem
			_ = json.Unmarshal(r.Body, &p)
			if !strings.Contains(p.Detail, tc.mention) {
				t.Fatalf("detail %q does not mention %q", p.Detail, tc.mention)
			}
			if after := getFaults(t, env); after != before {
				t.Fatalf("a refused change changed the switches: %+v → %+v", before, after)
			}
		})
	}
}

func TestRandomMode(t *testing.T) {
	t.Parallel()
	// outcomes pays n fresh keys and lists their statuses.
	outcomes := func(env *fiEnv, prefix string, n int) []int {
		var got []int
		for i := range n {
			r := env.mustPay(fmt.Sprintf("%s-%d", prefix, i), fmt.Sprintf(`{"order_id":"%s-%d","amount_satang":100}`, prefix, i))
			got = append(got, r.Status)
		}
		return got
	}
	const settings = `{"server":{"server_error":true},"gateway":{"decline":true},"random":{"enabled":true,"seed":20261130,"probability":0.5}}`

	t.Run("the same seed gives the same faults to the same sequence of requests", func(t *testing.T) {
		env := newFIEnv(t, Config{})
		env.setFaults(settings)
		first := outcomes(env, "r1", 24)
		env.setFaults(settings) // setting the switches restarts the sequence from the seed
		second := outcomes(env, "r2", 24)
		if !reflect.DeepEqual(first, second) {
			t.Fatalf("first run %v, second run %v", first, second)
		}
		other := newFIEnv(t, Config{})
		other.setFaults(settings)
		if third := outcomes(other, "r3", 24); !reflect.DeepEqual(first, third) {
			t.Fatalf("another server with the same seed: %v, want %v", third, first)
		}
		seen := map[int]bool{}
		for _, s := range first {
			seen[s] = true
		}
		if !seen[201] || !seen[402] || !seen[500] {
			t.Fatalf("with probability 0.5 expected a mix of 201, 402 and 500, got %v", first)
		}
	})

	t.Run("probability 0 never fires and probability 1 always fires", func(t *testing.T) {
		env := newFIEnv(t, Config{})
		env.setFaults(`{"server":{"server_error":true},"random":{"enabled":true,"seed":1,"probability":0}}`)
		for _, s := range outcomes(env, "p0", 8) {
			if s != 201 {
				t.Fatalf("probability 0 fired: %d", s)
			}
		}
		env.setFaults(`{"server":{"server_error":true},"random":{"enabled":true,"seed":1,"probability":1}}`)
		for _, s := range outcomes(env, "p1", 8) {
			if s != 500 {
				t.Fatalf("probability 1 did not fire: %d", s)
			}
		}
	})

	t.Run("a replay is never thinned: a key that got a fault keeps its answer", func(t *testing.T) {
		env := newFIEnv(t, Config{})
		env.setFaults(settings)
		for i, s := range outcomes(env, "rk", 12) {
			r := env.mustPay(fmt.Sprintf("rk-%d", i), fmt.Sprintf(`{"order_id":"rk-%d","amount_satang":100}`, i))
			if r.Status != s || !isReplay(r) {
				t.Fatalf("key %d: first %d, retry %d replayed=%v", i, s, r.Status, isReplay(r))
			}
		}
	})
}

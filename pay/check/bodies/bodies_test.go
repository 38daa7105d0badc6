package bodies

import (
	"encoding/json"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"
)

// FuzzReorder: a reordered body, when there is one, is the same request
// in other bytes: the same JSON object, or the same form.
func FuzzReorder(f *testing.F) {
	for _, seed := range []string{
		`{"order_id":"a","amount_satang":1}`,
		`{"a":{"b":[1,2,{"c":null}]},"d":"\u00e9","e":true}`,
		`{"only":1}`, `[]`, `{"a":1,"a":2}`, `{`, `order_id=a&amount_satang=1`, ``,
	} {
		f.Add(seed, false)
		f.Add(seed, true)
	}
	f.Fuzz(func(t *testing.T, body string, form bool) {
		out, ok := Reorder(body, form)
		if !ok {
			return
		}
		if form {
			a, errA := url.ParseQuery(body)
			b, errB := url.ParseQuery(out)
			if (errA == nil) != (errB == nil) || len(a) != len(b) {
				t.Fatalf("%q became %q", body, out)
			}
			return
		}
		var a, b map[string]any
		if json.Unmarshal([]byte(body), &a) != nil {
			return // reorder read it token by token: duplicates and all
		}
		if err := json.Unmarshal([]byte(out), &b); err != nil {
			t.Fatalf("%q became %q, not JSON: %v", body, out, err)
		}
		if !hasDuplicates(body) && !reflect.DeepEqual(a, b) {
			t.Fatalf("%q became %q, another object", body, out)
		}
	})
}

// hasDuplicates says a top-level member name repeats (the last one wins
// in Go, so a reversed order changes the value).
func hasDuplicates(body string) bool {
	dec := json.NewDecoder(strings.NewReader(body))
	if _, err := dec.Token(); err != nil {
		return false
	}
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return false
		}
		name, _ := t.(string)
		if seen[name] {
			return true
		}
		seen[name] = true
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return false
		}
	}
	return false
}

func TestReorder(t *testing.T) {
	out, ok := Reorder(`{"order_id":"x","amount_satang":5,"meta":{"a":1}}`, false)
	if !ok || out != `{"meta":{"a":1},"amount_satang":5,"order_id":"x"}` {
		t.Errorf("%q %v", out, ok)
	}
	if _, ok := Reorder(`{"only":1}`, false); ok {
		t.Error("one member reordered")
	}
}

// FuzzRetention: a policy document of any shape gives a positive
// retention or none, never a panic.
func FuzzRetention(f *testing.F) {
	for _, seed := range []string{
		`{"retention_seconds":86400}`, `{"key_ttl":"24h"}`, `{"expires_after":"P1DT2H"}`,
		`{"retention_ms":5}`, `{"retention":"PT"}`, `{"retention":-1}`, `not json`, `{"ttl":"P9999999999999999999D"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		if d, _, ok := RetentionOf(doc); ok && d <= 0 {
			t.Fatalf("%q: retention %s", doc, d)
		}
	})
}

func TestRetentionOf(t *testing.T) {
	for doc, want := range map[string]time.Duration{
		`{"retention_seconds":86400,"header":"Idempotency-Key"}`: 24 * time.Hour,
		`{"key_ttl":"90m"}`:                90 * time.Minute,
		`{"expires_after":"P1DT2H"}`:       26 * time.Hour,
		`{"header":"Idempotency-Key"}`:     0,
		`{"retention":"kept for a while"}`: 0,
		`{"retention_seconds":1e300}`:      0,
	} {
		d, _, ok := RetentionOf([]byte(doc))
		if d != want || ok != (want > 0) {
			t.Errorf("%s: %s %v, want %s", doc, d, ok, want)
		}
	}
}

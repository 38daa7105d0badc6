// Package bodies reads and rewrites the documents the checker's cases
// send and receive: a request body with its members in another order,
// and how long a published key policy says keys are kept. They are a
// package of their own so that their tests, which need their insides,
// are not test files of package check: a test file inside check makes
// check's test binary build its own copy of web and web/workshop, which
// import check.
package bodies

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Reorder gives body's members in reverse order: the same JSON object
// (or form) in other bytes. ok is false for a body of fewer than two
// members.
func Reorder(body string, form bool) (string, bool) {
	if form {
		parts := strings.Split(body, "&")
		if len(parts) < 2 {
			return "", false
		}
		for i, j := 0, len(parts)-1; i < j; i, j = i+1, j-1 {
			parts[i], parts[j] = parts[j], parts[i]
		}
		return strings.Join(parts, "&"), true
	}
	dec := json.NewDecoder(strings.NewReader(body))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return "", false
	}
	type member struct {
		name  string
		value json.RawMessage
	}
	var members []member
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return "", false
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return "", false
		}
		members = append(members, member{t.(string), v})
	}
	if len(members) < 2 {
		return "", false
	}
	var b bytes.Buffer
	b.WriteByte('{')
	for i := len(members) - 1; i >= 0; i-- {
		name, _ := json.Marshal(members[i].name)
		b.Write(name)
		b.WriteByte(':')
		b.Write(members[i].value)
		if i > 0 {
			b.WriteByte(',')
		}
	}
	b.WriteByte('}')
	return b.String(), true
}

// RetentionOf finds how long keys are kept in a policy document: a
// top-level member whose name speaks of retention, expiry or a TTL,
// holding seconds or a duration ("24h", "PT24H").
func RetentionOf(doc []byte) (time.Duration, string, bool) {
	var obj map[string]any
	if json.Unmarshal(doc, &obj) != nil {
		return 0, "", false
	}
	for _, name := range slices.Sorted(maps.Keys(obj)) {
		lower := strings.ToLower(name)
		if !strings.Contains(lower, "retention") && !strings.Contains(lower, "ttl") && !strings.Contains(lower, "expir") {
			continue
		}
		switch v := obj[name].(type) {
		case float64:
			if v > 0 {
				unit := time.Second
				if strings.Contains(lower, "ms") || strings.Contains(lower, "milli") {
					unit = time.Millisecond
				} else if strings.Contains(lower, "hour") {
					unit = time.Hour
				}
				// Past what a Duration holds it is no retention to test.
				if d := v * float64(unit); d < float64(1<<62) {
					return time.Duration(d), name, true
				}
			}
		case string:
			if d, err := time.ParseDuration(v); err == nil && d > 0 {
				return d, name, true
			}
			if d, ok := isoDuration(v); ok {
				return d, name, true
			}
		}
	}
	return 0, "", false
}

// isoDuration reads the ISO 8601 durations policies use: PnDTnHnMnS.
func isoDuration(s string) (time.Duration, bool) {
	s = strings.ToUpper(strings.TrimSpace(s))
	if !strings.HasPrefix(s, "P") || len(s) < 3 {
		return 0, false
	}
	var d time.Duration
	inTime := false
	num := ""
	for _, c := range s[1:] {
		switch {
		case c == 'T':
			inTime = true
		case c >= '0' && c <= '9':
			num += string(c)
		default:
			n, err := strconv.Atoi(num)
			if err != nil {
				return 0, false
			}
			num = ""
			switch {
			case c == 'D' && !inTime:
				d += time.Duration(n) * 24 * time.Hour
			case c == 'H' && inTime:
				d += time.Duration(n) * time.Hour
			case c == 'M' && inTime:
				d += time.Duration(n) * time.Minute
			case c == 'S' && inTime:
				d += time.Duration(n) * time.Second
			default:
				return 0, false
			}
		}
	}
	return d, d > 0 && num == ""
}

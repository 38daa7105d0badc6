package check

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// policyInfo is what case 11 read of the endpoint's published policy.
type policyInfo struct {
	url       string
	retention time.Duration // 0 when it names none
}

// maxPolicyBytes bounds the policy document read.
const maxPolicyBytes = 256 << 10

// Case 11: the key policy is published (informational). A document
// counts as a policy only if it names how long keys are kept.
func casePolicy(ctx context.Context, r *run) Result {
	u, _ := urlOrigin(r.cfg.URL)
	var seen []string
	for _, path := range []string{"/v1/idempotency-policy", "/.well-known/idempotency-policy", "/idempotency-policy"} {
		hr, err := http.NewRequestWithContext(ctx, http.MethodGet, u+path, nil)
		if err != nil {
			break
		}
		res, err := r.client.Do(hr)
		if err != nil {
			break
		}
		b, _ := io.ReadAll(io.LimitReader(res.Body, maxPolicyBytes))
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			continue
		}
		if d, field, ok := retentionOf(b); ok {
			r.policy = &policyInfo{url: u + path, retention: d}
			return Result{Verdict: Info, Detail: fmt.Sprintf("published at %s: keys kept %s (%s)", u+path, d, field)}
		}
		seen = append(seen, fmt.Sprintf("%s answers 200%s but names no retention", u+path, excerptOf(string(b))))
	}
	if len(seen) > 0 {
		return Result{Verdict: Info, Detail: strings.Join(seen, "; ") + ": not a policy the draft asks for (how long keys are kept)"}
	}
	return Result{Verdict: Info, Detail: "no policy found at " + u + "/v1/idempotency-policy or /.well-known/idempotency-policy; the draft asks servers to publish how long keys are kept"}
}

// retentionOf finds how long keys are kept in a policy document: a
// top-level member whose name speaks of retention, expiry or a TTL,
// holding seconds or a duration ("24h", "PT24H").
func retentionOf(doc []byte) (time.Duration, string, bool) {
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

package check

// This file holds the oracles: what counts an action's effects (-count-url
// or the gateway's books), and the gateway's switches a case holds.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// effects counts action's effects through the oracle; ok is false
// without one (or when it could not be read, said in note).
func (r *run) effects(ctx context.Context, group, action string) (n int, ok bool, note string) {
	var u, field string
	switch {
	case r.gatewayUsed:
		u, field = r.gatewayCountURL(action), "charges"
	case r.cfg.CountURL != "":
		u, field = strings.ReplaceAll(r.cfg.CountURL, "{{id}}", url.QueryEscape(action)), r.cfg.CountField
	default:
		return 0, false, ""
	}
	start := time.Now()
	n, err := r.countAt(ctx, u, field)
	if err != nil {
		why := fmt.Sprintf("the %s oracle failed: %v", r.oracle, err)
		r.mu.Lock()
		if r.countErr == "" {
			r.countErr = why
		}
		r.mu.Unlock()
		return 0, false, why
	}
	end := time.Now()
	r.record(Record{Kind: KindCount, Group: group, Action: action, URL: u, Start: start, End: end, Count: n})
	return n, true, ""
}

// gatewayCountURL lists action's charges in the gateway's books.
func (r *run) gatewayCountURL(action string) string {
	return strings.TrimRight(r.cfg.Gateway, "/") + "/charges?order_id=" + url.QueryEscape(action)
}

// countAt GETs u and counts the array in field.
func (r *run) countAt(ctx context.Context, u, field string) (int, error) {
	hr, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	for name, vs := range r.cfg.Header {
		if strings.EqualFold(name, r.cfg.KeyHeader) || strings.EqualFold(name, "Content-Type") {
			continue
		}
		for _, v := range vs {
			hr.Header.Add(name, v)
		}
	}
	res, err := r.clientFor(u).Do(hr)
	if err != nil {
		return 0, errors.New(shortErr(err))
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 16<<20))
	if err != nil {
		return 0, err
	}
	if res.StatusCode < 200 || res.StatusCode > 299 {
		return 0, fmt.Errorf("GET %s answered %d %s%s", u, res.StatusCode, http.StatusText(res.StatusCode), excerptOf(string(b)))
	}
	raw := json.RawMessage(b)
	if field != "" {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(b, &obj); err != nil {
			return 0, fmt.Errorf("GET %s: not a JSON object: %v", u, err)
		}
		var ok bool
		if raw, ok = obj[field]; !ok {
			return 0, fmt.Errorf("GET %s: its answer has no field %q (it has %s)", u, field, strings.Join(slices.Sorted(maps.Keys(obj)), ", "))
		}
	}
	var arr []json.RawMessage
	if string(raw) == "null" {
		return 0, nil
	}
	if err := json.Unmarshal(raw, &arr); err != nil {
		return 0, fmt.Errorf("GET %s: %q is not an array", u, field)
	}
	return len(arr), nil
}

// gatewaySwitches sets the gateway's switches.
func (r *run) gatewaySwitches(ctx context.Context, sw map[string]any) error {
	b, _ := json.Marshal(sw)
	hr, err := http.NewRequestWithContext(ctx, http.MethodPut, strings.TrimRight(r.cfg.Gateway, "/")+"/switches", bytes.NewReader(b))
	if err != nil {
		return err
	}
	hr.Header.Set("Content-Type", "application/json")
	if r.cfg.GatewayToken != "" {
		hr.Header.Set(GatewayTokenHeader, r.cfg.GatewayToken)
	}
	res, err := r.gatewayClient.Do(hr)
	if err != nil {
		return errors.New(shortErr(err))
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, r.cfg.MaxBodyBytes))
	switch {
	case res.StatusCode == http.StatusForbidden || res.StatusCode == http.StatusUnauthorized:
		return fmt.Errorf("PUT %s/switches answered %d: the gateway takes switches from its presenter only (-gateway-token)", r.cfg.Gateway, res.StatusCode)
	case res.StatusCode != http.StatusOK:
		return fmt.Errorf("PUT %s/switches answered %d", r.cfg.Gateway, res.StatusCode)
	}
	return nil
}

// gatewayPending is how many of action's charges wait out their latency
// at the gateway.
func (r *run) gatewayPending(ctx context.Context, action string) (int, error) {
	hr, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(r.cfg.Gateway, "/")+"/charges?order_id="+url.QueryEscape(action), nil)
	if err != nil {
		return 0, err
	}
	res, err := r.gatewayClient.Do(hr)
	if err != nil {
		return 0, errors.New(shortErr(err))
	}
	defer res.Body.Close()
	var body struct {
		Pending int `json:"pending"`
	}
	if res.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s answered %d", hr.URL, res.StatusCode)
	}
	// The listing is bounded like every answer the checker reads.
	if err := json.NewDecoder(io.LimitReader(res.Body, r.cfg.MaxBodyBytes)).Decode(&body); err != nil {
		return 0, err
	}
	return body.Pending, nil
}

// waitPending waits, polling, until action has a charge in flight at the
// gateway, for at most limit.
func (r *run) waitPending(ctx context.Context, action string, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if n, err := r.gatewayPending(ctx, action); err == nil && n > 0 {
			return true
		}
		if sleep(ctx, 10*time.Millisecond) != nil {
			return false
		}
	}
	return false
}

// waitCharged waits, polling, until the gateway's books hold a charge for
// action, for at most limit.
func (r *run) waitCharged(ctx context.Context, action string, limit time.Duration) bool {
	u := strings.TrimRight(r.cfg.Gateway, "/") + "/charges?order_id=" + url.QueryEscape(action)
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if n, err := r.countAt(ctx, u, "charges"); err == nil && n > 0 {
			return true
		}
		if sleep(ctx, 10*time.Millisecond) != nil {
			return false
		}
	}
	return false
}

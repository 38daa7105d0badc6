package check

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"paytwice/pay/check/bodies"
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
		if d, field, ok := bodies.RetentionOf(b); ok {
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

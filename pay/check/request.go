package check

import (
	"context"
	crand "crypto/rand"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// newID is a fresh action id.
func (r *run) newID() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ids++
	return fmt.Sprintf("%s-%d", r.prefix, r.ids)
}

// newKey is a fresh random key shaped like a UUID v4.
func (r *run) newKey() string {
	r.rngMu.Lock()
	defer r.rngMu.Unlock()
	var b [16]byte
	if r.cfg.Unguessable {
		copy(b[:], secretBytes(len(b)))
	} else {
		for i := range b {
			b[i] = byte(r.rng.Uint32())
		}
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// secretBytes are n bytes from crypto/rand, which never fails.
func secretBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = crand.Read(b)
	return b
}

// keyChars are the characters of a random key: letters, digits and the
// marks every server's key syntax allows.
const keyChars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

// randomKey is a key of n random characters.
func (r *run) randomKey(n int) string {
	r.rngMu.Lock()
	defer r.rngMu.Unlock()
	b := make([]byte, n)
	for i := range b {
		b[i] = keyChars[r.rng.IntN(len(keyChars))]
	}
	return string(b)
}

// otherPathURL is -other-path on the endpoint's origin.
func (r *run) otherPathURL() string {
	origin, _ := urlOrigin(r.cfg.URL)
	return origin + r.cfg.OtherPath
}

// newAmount is a fresh amount.
func (r *run) newAmount() int64 {
	r.rngMu.Lock()
	defer r.rngMu.Unlock()
	return 1000 + r.rng.Int64N(9000)
}

// req is one request a case sends.
type req struct {
	group, action string
	// key is the key's value; header, when set, is sent instead of it
	// (quoted forms, bad keys); noKey sends no key header at all.
	key, header string
	noKey       bool
	amount      int64
	badBody     bool // an invalid body: {{amount}} is not a number
	method      string
	url         string
	other       bool // as the second caller (-other-auth)
	noRecord    bool
	caseNum     int
	// noBody sends no body (a GET); lowerHeader sends the key under the
	// header's name in lower case.
	noBody, lowerHeader bool
	// fingerprintAs, when set, is the fingerprint recorded: the request
	// is the same as another one in other bytes (reordered JSON).
	fingerprintAs string
	// recordKey, when set, is the key the history records: the same key
	// reused once its retention is over is, for the model, another key.
	recordKey string
	// expectContinue asks for "100 Continue" (Expect: 100-continue): a
	// server sends it once it starts reading the body, which tells the
	// checker that the request is in the server's hands.
	expectContinue bool
}

// body fills the template for q.
func (r *run) body(q req) string {
	amount := strconv.FormatInt(q.amount, 10)
	if q.amount == 0 {
		amount = "1000"
	}
	b := strings.ReplaceAll(r.cfg.Body, "{{id}}", q.action)
	if q.badBody {
		if strings.Contains(b, "{{amount}}") {
			return strings.ReplaceAll(b, "{{amount}}", `"not-a-number`)
		}
		return b[:len(b)/2]
	}
	return strings.ReplaceAll(b, "{{amount}}", amount)
}

// newRequest builds q's HTTP request.
func (r *run) newRequest(ctx context.Context, q req) (*http.Request, string, error) {
	method := q.method
	if method == "" {
		method = http.MethodPost
	}
	u := q.url
	if u == "" {
		u = r.cfg.URL
	}
	body := r.body(q)
	var rd io.Reader = strings.NewReader(body)
	if q.noBody {
		body, rd = "", nil
	}
	hr, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, "", err
	}
	for name, vs := range r.cfg.Header {
		for _, v := range vs {
			hr.Header.Add(name, v)
		}
	}
	switch {
	case q.noBody:
	case r.cfg.Form:
		hr.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	default:
		hr.Header.Set("Content-Type", "application/json")
	}
	if q.other {
		hr.Header.Set("Authorization", r.cfg.OtherAuth)
	}
	if q.expectContinue {
		hr.Header.Set("Expect", "100-continue")
	}
	switch {
	case q.noKey:
	case q.lowerHeader:
		// Sent as written: Go writes a header name that is not in its
		// canonical form as it is.
		hr.Header[strings.ToLower(r.cfg.KeyHeader)] = []string{q.key}
	case q.header != "" || q.key == "":
		hr.Header[http.CanonicalHeaderKey(r.cfg.KeyHeader)] = []string{q.header}
	default:
		hr.Header.Set(r.cfg.KeyHeader, q.key)
	}
	return hr, body, nil
}

// recordOf starts q's history record. Its key is the header's value as
// sent: whether a quoted and a bare form are one key is for the server's
// answers to tell (case 6 records them as one when they are).
func (r *run) recordOf(q req, method, u, body string) Record {
	caller := "main"
	if q.other {
		caller = "other"
	}
	key := q.key
	switch {
	case q.noKey:
		key = ""
	case q.header != "":
		key = q.header
	}
	if q.recordKey != "" {
		key = q.recordKey
	}
	fp := fingerprint(method, u, body)
	if q.fingerprintAs != "" {
		fp = q.fingerprintAs
	}
	return Record{Kind: KindRequest, Case: q.caseNum, Group: q.group, Action: q.action, Caller: caller, Key: key,
		Method: method, URL: u, Body: body, Fingerprint: fp}
}

// retryUntilAnswered sends q until it gets an answer that is not 409,
// 429 or 5xx, honouring Retry-After (at most maxRetryWait), for at most
// cfg.Patience and maxRetries tries. It gives up early on an answer the
// server has saved (the same 5xx, byte for byte, three times in a row)
// and on an endpoint that no longer takes any payment, which stops the
// run.
func (r *run) retryUntilAnswered(ctx context.Context, q req) (answer, int) {
	var a, prev answer
	deadline := time.Now().Add(r.cfg.Patience)
	same := 0
	for i := range maxRetries {
		a = r.send(ctx, q)
		if !a.NoAnswer && a.Status != http.StatusConflict && a.Status != http.StatusTooManyRequests && a.Status < 500 {
			return a, i + 1
		}
		if a.Status >= 500 && a.same(prev) {
			same++
		} else {
			same = 0
		}
		prev = a
		if same >= 2 {
			return a, i + 1 // saved: every retry will get it
		}
		if (a.unreached || a.Status >= 500 || (a.NoAnswer && a.bound == "")) && i%3 == 1 {
			if !r.alive(ctx, fmt.Sprintf("a retry of %s with its key was answered %s", q.action, a)) {
				return a, i + 1
			}
		}
		wait, ok := a.retryAfter()
		if !ok {
			wait = min(200*time.Millisecond<<min(i, 5), maxRetryWait)
		}
		wait = min(max(wait, 50*time.Millisecond), maxRetryWait)
		if time.Now().Add(wait).After(deadline) {
			return a, i + 1
		}
		if err := r.cfg.RetryWait(ctx, wait); err != nil {
			return a, i + 1
		}
	}
	return a, maxRetries
}

func urlOrigin(raw string) (string, error) {
	i := strings.Index(raw, "://")
	if i < 0 {
		return raw, fmt.Errorf("no scheme")
	}
	rest := raw[i+3:]
	if j := strings.IndexByte(rest, '/'); j >= 0 {
		rest = rest[:j]
	}
	return raw[:i+3] + rest, nil
}

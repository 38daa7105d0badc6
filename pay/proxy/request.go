package proxy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"

	"paytwice/pay"
)

// MaxBody bounds what the proxy reads of a request body. A payment body
// is a few dozen bytes; the API itself refuses more than 16 KiB.
const MaxBody = 64 << 10

// clientRequest is what the grader needs of one request: its key, what
// its body says (whatever the order of its fields), and the order it pays
// for, so that the API's books can be asked about it.
type clientRequest struct {
	Method string
	Path   string
	// Key is the Idempotency-Key as the API reads it ("abc" and abc are
	// one key); a malformed header is kept as sent, so that a client
	// that sends two different malformed keys is still seen changing
	// keys. HasKey is false without the header.
	Key    string
	HasKey bool
	// Body is a digest of the canonical body: a JSON object or a form
	// with the same fields and values has the same digest, however the
	// fields are ordered and spaced.
	Body string
	// Order is the body's order_id, "" when it has none.
	Order string
}

// parseRequest reads a client's request. It never fails: whatever a
// client sends is recorded, and the API answers it.
func parseRequest(method, path string, h http.Header, body []byte) clientRequest {
	r := clientRequest{Method: method, Path: path}
	if vals := h.Values("Idempotency-Key"); len(vals) > 0 {
		r.HasKey = true
		if k, err := pay.ParseKey(vals); err == nil {
			r.Key = k
		} else {
			r.Key = strings.Join(vals, ", ")
		}
	}
	canon, order := canonicalBody(h.Get("Content-Type"), body)
	sum := sha256.Sum256(append([]byte(method+" "+path+"\n"), canon...))
	r.Body = hex.EncodeToString(sum[:12])
	r.Order = order
	return r
}

// canonicalBody is the body with its fields sorted, and its order_id.
// A JSON object is re-encoded (encoding/json sorts map keys); a form is
// re-encoded by url.Values, which sorts too; anything else is kept as it
// is.
func canonicalBody(contentType string, body []byte) (canon []byte, order string) {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) > 0 && trimmed[0] == '{' {
		var obj map[string]any
		dec := json.NewDecoder(bytes.NewReader(trimmed))
		dec.UseNumber()
		if err := dec.Decode(&obj); err == nil && !dec.More() {
			if b, err := json.Marshal(obj); err == nil {
				if s, ok := obj["order_id"].(string); ok {
					order = s
				}
				return b, order
			}
		}
		return body, ""
	}
	if strings.HasPrefix(strings.ToLower(contentType), "application/x-www-form-urlencoded") {
		if q, err := url.ParseQuery(string(body)); err == nil {
			return []byte(q.Encode()), q.Get("order_id")
		}
	}
	return body, ""
}

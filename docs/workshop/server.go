// Command server is the workshop's reference endpoint: POST /v1/payments, safe to retry.
// GATEWAY is the gateway address the workshop page shows; ADDR where to listen (:8000).
package main

import (
	"cmp"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

type entry struct{ payment, answer string } // the answer is "" while the key's first request is at work
var keys sync.Map                           // an entry per caller and key

// gateway follows no redirect (nor does the room): what it points at is not the gateway the workshop page named.
var gateway = &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func pay(w http.ResponseWriter, r *http.Request) (int, string) { // a status and a body, or a refusal's title
	var p struct {
		OrderID string `json:"order_id"`
		Amount  int64  `json:"amount_satang"`
	}
	key := r.Header.Get("Idempotency-Key")
	if key == "" || len(key) > 255 || json.NewDecoder(r.Body).Decode(&p) != nil || p.OrderID == "" || p.Amount <= 0 {
		return 400, "send an Idempotency-Key and {order_id, amount_satang}" // nothing is saved
	}
	scoped, payment := r.Header.Get("Authorization")+"\n"+key, js(p)
	saved, seen := keys.LoadOrStore(scoped, entry{payment, ""}) // looked up and claimed in one step
	switch e := saved.(entry); {
	case seen && e.payment != payment:
		return 422, "this key was used for another payment"
	case seen && e.answer == "":
		w.Header().Set("Retry-After", "1")
		return 409, "this key's first request is still running"
	case seen:
		w.Header().Set("Idempotent-Replayed", "true")
		return 201, e.answer
	}
	// The gateway's key is made from the caller's: asking again (no answer came, or the client retries) finds the
	// charge made. Not with r's context: a client that hangs up stops no charge halfway.
	status, c := 0, struct{ ID string }{}
	for try := 0; try < 2 && (status == 0 || status >= 500); try++ { // no answer, or a 5xx: ask once more
		req, _ := http.NewRequest("POST", os.Getenv("GATEWAY")+"/charges", strings.NewReader(js(map[string]any{"order_id": p.OrderID, "amount": p.Amount})))
		req.Header.Set("Idempotency-Key", fmt.Sprintf("%x", sha256.Sum256([]byte(scoped))))
		if res, err := gateway.Do(req); err == nil {
			status, c.ID = res.StatusCode, ""
			json.NewDecoder(res.Body).Decode(&c) // no charge in it: its status counts all the same
			res.Body.Close()
		}
	}
	if status/100 == 2 && c.ID != "" { // charged: the answer is kept for every replay
		answer := js(map[string]any{"charge_id": c.ID, "status": "paid", "order_id": p.OrderID, "amount_satang": p.Amount})
		keys.Store(scoped, entry{payment, answer})
		return 201, answer
	}
	keys.Delete(scoped)  // released: a retry asks the gateway again, with the same key, which finds any charge made
	if status/100 == 4 { // refused (a declined card): asking again changes nothing
		return status, "the gateway refused the charge"
	}
	w.Header().Set("Retry-After", "1")
	return 502, "the gateway did not confirm the charge: retry with the same key"
}

func main() {
	http.HandleFunc("POST /v1/payments", func(w http.ResponseWriter, r *http.Request) {
		status, body := pay(w, r)
		if w.Header().Set("Content-Type", "application/json"); status >= 400 { // a refusal, as problem+json
			w.Header().Set("Content-Type", "application/problem+json")
			body = js(map[string]any{"title": body, "status": status})
		}
		w.WriteHeader(status)
		fmt.Fprint(w, body)
	})
	panic(http.ListenAndServe(cmp.Or(os.Getenv("ADDR"), ":8000"), nil))
}

func js(v any) string { b, _ := json.Marshal(v); return string(b) }

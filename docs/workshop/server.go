// Command server is the workshop's reference endpoint, POST /v1/payments
// safe to retry, in Go's standard library. GATEWAY is the gateway address
// the workshop page shows; ADDR where to listen (default :8000).
package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"
)

type entry struct {
	fingerprint string
	status      int // 0 while the first request is at work
	body        []byte
}

var mu sync.Mutex
var keys = map[string]*entry{} // (caller, key) → what the key did

func reply(w http.ResponseWriter, status int, kind string, body []byte) {
	w.Header().Set("Content-Type", kind)
	w.WriteHeader(status)
	w.Write(body)
}

func problem(w http.ResponseWriter, status int, title string) {
	w.Header().Set("Retry-After", "1")
	reply(w, status, "application/problem+json", fmt.Appendf(nil, `{"title":%q,"status":%d}`, title, status))
}

func pay(w http.ResponseWriter, r *http.Request) {
	var p struct {
		OrderID string `json:"order_id"`
		Amount  int64  `json:"amount_satang"`
	}
	key, body := r.Header.Get("Idempotency-Key"), must(io.ReadAll(io.LimitReader(r.Body, 4096)))
	if key == "" || len(key) > 255 || json.Unmarshal(body, &p) != nil || p.OrderID == "" || p.Amount <= 0 {
		problem(w, 400, "send an Idempotency-Key and {order_id, amount_satang}") // nothing saved
		return
	}
	scoped, fp := r.Header.Get("Authorization")+"\n"+key, fmt.Sprintf("%q %d", p.OrderID, p.Amount)
	mu.Lock() // look the key up and claim it in one step
	e, seen := keys[scoped]
	if !seen {
		keys[scoped] = &entry{fingerprint: fp}
	} else {
		e = &entry{e.fingerprint, e.status, e.body} // a copy, read outside the lock
	}
	mu.Unlock()
	switch {
	case seen && e.fingerprint != fp:
		problem(w, 422, "this key was used for another payment")
		return
	case seen && e.status == 0:
		problem(w, 409, "this key's first request is still running")
		return
	case seen:
		w.Header().Set("Idempotent-Replayed", "true")
		reply(w, e.status, "application/json", e.body)
		return
	}
	// The gateway is idempotent too: the same key for every try finds the same charge, so an
	// answer lost on the way back is asked for again. Not r.Context(): a client hanging up must not stop a charge.
	gwBody := must(json.Marshal(map[string]any{"order_id": p.OrderID, "amount": p.Amount}))
	var res *http.Response
	var err error
	for try := 0; try < 3 && (try == 0 || err != nil); try++ {
		req, _ := http.NewRequest("POST", os.Getenv("GATEWAY")+"/charges", bytes.NewReader(gwBody))
		req.Header.Set("Idempotency-Key", fmt.Sprintf("%x", sha256.Sum256([]byte(scoped))))
		res, err = (&http.Client{Timeout: 10 * time.Second}).Do(req)
	}
	var charge struct{ ID string }
	if err == nil {
		defer res.Body.Close()
		err = json.NewDecoder(res.Body).Decode(&charge)
	}
	mu.Lock()
	defer mu.Unlock()
	if err != nil || res.StatusCode >= 300 {
		delete(keys, scoped) // release the key: a retry asks the gateway again, with the same key
		problem(w, 502, "the gateway did not confirm the charge: retry with the same key")
		return
	}
	out := must(json.Marshal(map[string]any{"charge_id": charge.ID, "status": "paid", "order_id": p.OrderID, "amount_satang": p.Amount}))
	*keys[scoped] = entry{fingerprint: fp, status: 201, body: out}
	reply(w, 201, "application/json", out)
}

func must[T any](v T, _ error) T { return v }

func main() {
	http.HandleFunc("POST /v1/payments", pay)
	addr := os.Getenv("ADDR")
	if addr == "" {
		addr = ":8000"
	}
	panic(http.ListenAndServe(addr, nil))
}

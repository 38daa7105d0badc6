// Command server is the workshop's reference endpoint: POST /v1/payments, safe to retry.
// GATEWAY is the gateway address the workshop page shows; ADDR where to listen (:8000).
package main

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"
)

type entry struct{ payment, answer string } // the answer is "" while the first request runs

var keys sync.Map // an entry by caller and key
var gateway = &http.Client{Timeout: 10 * time.Second}

// pay decides the answer: its status and body.
func pay(r *http.Request) (int, string) {
	var p struct {
		OrderID string `json:"order_id"`
		Amount  int64  `json:"amount_satang"`
	}
	key := r.Header.Get("Idempotency-Key")
	if key == "" || len(key) > 255 || json.NewDecoder(r.Body).Decode(&p) != nil {
		return 400, `{"error": "send an Idempotency-Key and {order_id, amount_satang}"}`
	}
	payment, _ := json.Marshal(map[string]any{"order_id": p.OrderID, "amount": p.Amount})
	scoped := r.Header.Get("Authorization") + "\n" + key                // each caller's keys apart
	saved, seen := keys.LoadOrStore(scoped, entry{string(payment), ""}) // claimed in one step
	switch e := saved.(entry); {
	case seen && e.payment != string(payment):
		return 422, `{"error": "this key was used for another payment"}`
	case seen && e.answer == "":
		return 409, `{"error": "this key's payment is running"}`
	case seen:
		return 201, e.answer // the saved answer
	}
	// The gateway's key is made from the caller's: asking again never charges twice.
	status, charge := 0, struct{ ID string }{}
	for try := 0; try < 2 && (status == 0 || status >= 500); try++ { // no answer, or a 5xx
		req, _ := http.NewRequest("POST", os.Getenv("GATEWAY")+"/charges", bytes.NewReader(payment))
		req.Header.Set("Idempotency-Key", fmt.Sprintf("%x", sha256.Sum256([]byte(scoped))))
		if res, err := gateway.Do(req); err == nil {
			status, charge.ID = res.StatusCode, ""
			json.NewDecoder(res.Body).Decode(&charge) // no charge in it: charge.ID stays ""
			res.Body.Close()
		}
	}
	if status/100 == 2 && charge.ID != "" { // charged: the answer is kept for every replay
		answer, _ := json.Marshal(map[string]string{"charge_id": charge.ID, "status": "paid"})
		keys.Store(scoped, entry{string(payment), string(answer)})
		return 201, string(answer)
	}
	keys.Delete(scoped)  // nothing charged, or not known: the key is free again
	if status/100 == 4 { // refused (a declined card): sending it again changes nothing
		return status, `{"error": "the gateway refused the charge"}`
	}
	return 502, `{"error": "the gateway did not answer: retry with the same key"}`
}

func main() {
	http.HandleFunc("POST /v1/payments", func(w http.ResponseWriter, r *http.Request) {
		status, body := pay(r)
		w.Header().Set("Content-Type", "application/json")
		if status == 409 || status == 502 { // worth sending again, with the same key
			w.Header().Set("Retry-After", "1")
		}
		w.WriteHeader(status)
		fmt.Fprint(w, body)
	})
	panic(http.ListenAndServe(cmp.Or(os.Getenv("ADDR"), ":8000"), nil))
}

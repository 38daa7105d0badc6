package sim

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// sharedBooks are books two gateways share, as two servers' gateways of
// one student share the store: idempotent by key, failing on demand.
type sharedBooks struct {
	mu   sync.Mutex
	kept []GatewayHTTPCharge
	fail bool
	// closed, when set, refuses every charge with it as the reason.
	closed string
}

func (b *sharedBooks) Record(_ context.Context, c GatewayHTTPCharge) (GatewayHTTPCharge, bool, GatewayTally, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fail {
		return GatewayHTTPCharge{}, false, GatewayTally{}, errors.New("the books are away")
	}
	if b.closed != "" {
		return GatewayHTTPCharge{}, false, GatewayTally{}, &GatewayClosed{Reason: b.closed}
	}
	for _, k := range b.kept {
		if k.Key == c.Key {
			return k, false, GatewayTally{Held: len(b.kept)}, nil
		}
	}
	b.kept = append(b.kept, c)
	return c, true, GatewayTally{Held: len(b.kept)}, nil
}

func (b *sharedBooks) ByOrder(_ context.Context, order string, limit int) ([]GatewayHTTPCharge, int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []GatewayHTTPCharge
	for _, k := range b.kept {
		if k.OrderID == order {
			out = append(out, k)
		}
	}
	return out[max(len(out)-limit, 0):], len(out), nil
}

// TestGatewayBooksDecide: two gateways on one set of books (two servers,
// or one before and after a restart) answer one key with one charge,
// even with twenty requests of it racing on both; an order lists the
// charges either made; a gateway started on kept books knows their keys;
// books that do not answer are a 503, and the same key afterwards is
// charged once; books closed to charges (the student removed) are a 410
// with their reason, not an outage.
func TestGatewayBooksDecide(t *testing.T) {
	books := &sharedBooks{}
	var servers []*httptest.Server
	for range 2 {
		g := NewGatewayHandler(time.Now)
		g.KeepIn(books, nil, GatewayTally{})
		hs := httptest.NewServer(g)
		defer hs.Close()
		servers = append(servers, hs)
	}
	charge := func(base, key, order string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, base+"/charges", strings.NewReader(`{"order_id": "`+order+`", "amount": 100}`))
		req.Header.Set("Idempotency-Key", key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return 0, ""
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	var wg sync.WaitGroup
	codes := make([]int, 20)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i], _ = charge(servers[i%2].URL, "k1", "A-1")
		}()
	}
	wg.Wait()
	fresh := 0
	for _, c := range codes {
		switch c {
		case http.StatusCreated:
			fresh++
		case http.StatusOK:
		default:
			t.Fatalf("a racing charge of k1 answered %d: %v", c, codes)
		}
	}
	if fresh != 1 || len(books.kept) != 1 {
		t.Fatalf("twenty racing charges of k1 on two gateways: %d answered 201, the books hold %d; want 1 and 1", fresh, len(books.kept))
	}
	if code, _ := charge(servers[1].URL, "k2", "A-1"); code != http.StatusCreated {
		t.Fatalf("k2 on the second gateway: %d, want 201", code)
	}
	res, err := http.Get(servers[0].URL + "/charges?order_id=A-1")
	if err != nil {
		t.Fatal(err)
	}
	listed, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(listed), `"key":"k1"`) || !strings.Contains(string(listed), `"key":"k2"`) {
		t.Errorf("the first gateway lists order A-1 as %s, want k1 and k2 (k2 charged on the second)", listed)
	}

	// A gateway started on the kept books (a restart) knows their keys.
	restarted := NewGatewayHandler(time.Now)
	restarted.KeepIn(books, append([]GatewayHTTPCharge(nil), books.kept...), GatewayTally{Held: len(books.kept)})
	hs := httptest.NewServer(restarted)
	defer hs.Close()
	if code, body := charge(hs.URL, "k1", "A-1"); code != http.StatusOK || !strings.Contains(body, books.kept[0].ID) {
		t.Errorf("k1 on the restarted gateway: %d %s, want 200 and the charge %s", code, body, books.kept[0].ID)
	}
	if l := restarted.Ledger(); l.Charges != 2 {
		t.Errorf("the restarted gateway holds %d charges, want the 2 kept", l.Charges)
	}

	books.mu.Lock()
	books.fail = true
	books.mu.Unlock()
	if code, body := charge(hs.URL, "k3", "A-2"); code != http.StatusServiceUnavailable || !strings.Contains(body, "same key") {
		t.Errorf("k3 while the books do not answer: %d %s, want 503 asking for the same key again", code, body)
	}
	books.mu.Lock()
	books.fail = false
	books.mu.Unlock()
	for i := range 2 {
		if code, _ := charge(hs.URL, "k3", "A-2"); code != []int{http.StatusCreated, http.StatusOK}[i] {
			t.Errorf("k3 once the books answer, try %d: %d", i+1, code)
		}
	}
	if len(books.kept) != 3 {
		t.Errorf("the books hold %d charges, want 3 (k1, k2, k3 once each)", len(books.kept))
	}

	books.mu.Lock()
	books.closed = "The presenter removed this student from the workshop."
	books.mu.Unlock()
	for i := range 2 { // asking again changes nothing
		code, body := charge(hs.URL, "k4", "A-3")
		if code != http.StatusGone || !strings.Contains(body, "The presenter removed this student") || strings.Contains(body, "did not answer") {
			t.Errorf("k4 on closed books, try %d: %d %s, want 410 with the books' reason", i+1, code, body)
		}
	}
	if len(books.kept) != 3 {
		t.Errorf("the closed books hold %d charges, want the 3 kept before", len(books.kept))
	}
}

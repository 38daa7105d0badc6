package web

import (
	"bytes"
	"cmp"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"paytwice/pay"
)

// The sandbox's form parser reads bodies written by the Stripe SDKs, and
// anything else a caller sends: whatever the bytes, it answers a request
// or a clear 4xx, never a panic, and what it accepts is within the limits.
//
//	go test -run '^$' -fuzz FuzzIntentForm ./web/
//
// The seeds are the bodies stripe-go, stripe-python and stripe-node send
// for a create and a confirm, and their near misses.

// intentFormSeeds are real SDK bodies and their near misses.
var intentFormSeeds = []string{
	// stripe-go v85 (keys in its order, confirm=true)
	"amount=12900&confirm=true&currency=thb&metadata[order_id]=SDK-0&payment_method=pm_card_visa",
	// stripe-python 5 writes booleans capitalised and escapes brackets
	"amount=12900&currency=thb&confirm=True&payment_method=pm_card_visa&metadata%5Border_id%5D=PY-0",
	"amount=12900&currency=thb&confirm=False&metadata%5Border_id%5D=PY-0",
	// stripe-node
	"amount=12900&currency=thb&confirm=false&metadata%5Border_id%5D=N-0",
	"payment_method=pm_card_visa",
	"",
	"amount=1.0&currency=thb&metadata[order_id]=A",
	"amount=1e2&currency=THB&metadata[order_id]=A&confirm=true",
	"amount=12900&amount=12900&currency=thb&metadata[order_id]=A",
	"amount=12900&currency=thb&metadata[order_id]=%00",
	"amount=12900&currency=thb&metadata[order_id]=%E0%B8%81&metadata[note]=%FF",
	"amount=12900&currency=thb&metadata[order_id]=A&payment_method=pm_card_chargeDeclined&confirm=TRUE",
	"amount=99999999999999999999&currency=thb&metadata[order_id]=A",
	"%zz=1", "&&&=", "metadata[=1", "return_url=https%3A%2F%2Fshop.example%2Fdone&off_session=true",
}

func FuzzIntentForm(f *testing.F) {
	for _, s := range intentFormSeeds {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, body []byte, confirming bool) {
		newShape := func() *intentShape {
			sh := &intentShape{}
			if confirming {
				sh.confirming = &intent{ID: intentIDPrefix + "00", Amount: 4200, Metadata: map[string]string{"order_id": "F-1"}}
			}
			return sh
		}
		read := func(b []byte) (*intentShape, pay.PaymentRequest, error) {
			r := httptest.NewRequest(http.MethodPost, intentsPath, bytes.NewReader(b))
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			sh := newShape()
			req, err := sh.read(r)
			return sh, req, err
		}
		sh, req, err := read(body)
		if err != nil {
			switch code := pay.ErrorCode(err); code {
			case pay.EINVALID, pay.ETOOLARGE:
				if st := problemFor(code).Status; st < 400 || st > 499 || pay.ErrorMessage(err) == "" {
					t.Fatalf("%q: %d %q", body, st, pay.ErrorMessage(err))
				}
				if st, _ := stripeError(problemBody(httptest.NewRequest(http.MethodPost, intentsPath, nil), err)); st != http.StatusBadRequest {
					t.Fatalf("%q: a Stripe SDK would read %d, want 400", body, st)
				}
			default:
				t.Fatalf("%q: refused with %s, want a 400 of the request's own", body, code)
			}
			return
		}
		switch {
		case confirming && (req.OrderID != "F-1" || req.AmountSatang != 4200 || sh.card == ""):
			t.Fatalf("confirm %q read %+v with card %q", body, req, sh.card)
		case !confirming && (req.AmountSatang <= 0 || req.AmountSatang > pay.MaxAmountSatang || pay.CheckOrderID(req.OrderID) != nil):
			t.Fatalf("create %q accepted %+v", body, req)
		case !confirming && sh.confirm && sh.card == "":
			t.Fatalf("create %q confirms without a payment_method", body)
		}
		if _, err := testCard(cmp.Or(sh.card, "pm_card_visa")); err != nil {
			t.Fatalf("%q: accepted the card %q", body, sh.card)
		}
		// The fingerprint covers the parameters, not their order: the same
		// parameters in the reverse order read the same.
		pairs := strings.Split(string(body), "&")
		slices.Reverse(pairs)
		again, req2, err := read([]byte(strings.Join(pairs, "&")))
		if err != nil || req2 != req || again.canonical != sh.canonical || again.confirm != sh.confirm || again.card != sh.card {
			t.Fatalf("%q and its reverse read differently: %+v %q / %+v %q %v", body, req, sh.canonical, req2, again.canonical, err)
		}
	})
}

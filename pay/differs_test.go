package pay_test

import (
	"reflect"
	"testing"

	"paytwice/pay"
)

func TestDiffersNamesWhatChangedSinceTheKeyFirstSawItsRequest(t *testing.T) {
	first := pay.KeyRow{Method: "POST", Path: "/v1/payments", OrderID: "A-1", AmountSatang: 100}
	cases := []struct {
		name         string
		method, path string
		req          pay.PaymentRequest
		want         []string
	}{
		{"the same request differs in nothing", "POST", "/v1/payments", pay.PaymentRequest{OrderID: "A-1", AmountSatang: 100}, nil},
		{"another order", "POST", "/v1/payments", pay.PaymentRequest{OrderID: "A-2", AmountSatang: 100}, []string{"order_id"}},
		{"another amount", "POST", "/v1/payments", pay.PaymentRequest{OrderID: "A-1", AmountSatang: 101}, []string{"amount_satang"}},
		{"another method and path", "PUT", "/v1/other", pay.PaymentRequest{OrderID: "A-1", AmountSatang: 100}, []string{"method", "path"}},
		{"everything", "PUT", "/v1/other", pay.PaymentRequest{OrderID: "A-2", AmountSatang: 1}, []string{"method", "path", "order_id", "amount_satang"}},
		{"a method or path not known is not compared", "", "", pay.PaymentRequest{OrderID: "A-2", AmountSatang: 100}, []string{"order_id"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := pay.Differs(c.method, c.path, c.req, first); !reflect.DeepEqual(got, c.want) {
				t.Errorf("Differs = %q, want %q", got, c.want)
			}
		})
	}
}

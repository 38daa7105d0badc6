package pay

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"unicode/utf8"
)

// PaymentRequest is the body of POST /v1/payments.
type PaymentRequest struct {
	OrderID      string `json:"order_id"`
	AmountSatang int64  `json:"amount_satang"`
}

// Limits on a payment request.
const (
	MaxBodyBytes    = 16 << 10
	MaxOrderIDLen   = 64
	MaxAmountSatang = 100_000_000_00 // one hundred million baht
)

// DecodePayment parses a payment body strictly. Money is an integer count
// of satang, so a float, a string, a negative or zero amount, a missing
// or unknown or repeated field, or anything after the object is refused
// with a message that names the problem.
func DecodePayment(body []byte) (PaymentRequest, error) {
	var req PaymentRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	bad := func(format string, args ...any) (PaymentRequest, error) {
		return PaymentRequest{}, Errorf(EINVALID, format, args...)
	}
	if !utf8.Valid(body) {
		return bad("The body is not valid UTF-8.")
	}
	tok, err := dec.Token()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return bad(`The body is empty; send {"order_id": "A-1001", "amount_satang": 129900}.`)
		}
		return bad("The body is not valid JSON: %s.", jsonError(err))
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return bad("The body must be a JSON object.")
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return bad("The body is not valid JSON: %s.", jsonError(err))
		}
		name := tok.(string) // inside an object, the decoder only yields string keys here
		if seen[name] {
			return bad("The field %q appears twice.", name)
		}
		seen[name] = true
		tok, err = dec.Token()
		if err != nil {
			return bad("The body is not valid JSON: %s.", jsonError(err))
		}
		switch name {
		case "order_id":
			s, ok := tok.(string)
			switch {
			case !ok:
				return bad("order_id must be a string, such as \"A-1001\".")
			case s == "":
				return bad("order_id must not be empty.")
			case len(s) > MaxOrderIDLen:
				return bad("order_id is %d bytes long; the limit is %d.", len(s), MaxOrderIDLen)
			}
			for _, r := range s {
				if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
					return bad("order_id must not contain control characters.")
				}
			}
			req.OrderID = s
		case "amount_satang":
			n, ok := tok.(json.Number)
			if !ok {
				return bad("amount_satang must be a whole number of satang (1 baht = 100 satang), such as 129900.")
			}
			v, err := strconv.ParseInt(n.String(), 10, 64)
			switch {
			case err != nil && isInteger(n.String()) && n.String()[0] == '-':
				return bad("amount_satang must be positive, not %s.", truncate(n.String(), 24))
			case err != nil && isInteger(n.String()):
				return bad("amount_satang is too large; the limit is %d satang.", MaxAmountSatang)
			case err != nil:
				return bad("amount_satang must be a whole number of satang, not %s: money is never a float.", truncate(n.String(), 24))
			case v <= 0:
				return bad("amount_satang must be positive, not %d.", v)
			case v > MaxAmountSatang:
				return bad("amount_satang is too large; the limit is %d satang.", MaxAmountSatang)
			}
			req.AmountSatang = v
		default:
			return bad("Unknown field %q; the body takes only order_id and amount_satang.", truncate(name, 40))
		}
	}
	if _, err := dec.Token(); err != nil {
		return bad("The body is not valid JSON: %s.", jsonError(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return bad("The body has data after the JSON object.")
	}
	switch {
	case !seen["order_id"]:
		return bad("order_id is missing.")
	case !seen["amount_satang"]:
		return bad("amount_satang is missing.")
	}
	return req, nil
}

// isInteger reports whether s is an optionally signed run of digits.
func isInteger(s string) bool {
	if s != "" && s[0] == '-' {
		s = s[1:]
	}
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func jsonError(err error) string {
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return "it ends too early"
	}
	var syn *json.SyntaxError
	if errors.As(err, &syn) {
		return syn.Error() + " at byte " + strconv.FormatInt(syn.Offset, 10)
	}
	return err.Error()
}

// Canonical is the request in one fixed encoding: the same payment always
// yields the same bytes whatever its key order or whitespace, so the
// fingerprint compares meaning, not formatting.
func (p PaymentRequest) Canonical() []byte {
	b, _ := json.Marshal(p)
	return b
}

package pay

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/url"
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
	if req, ok := decodePlain(body); ok {
		return req, nil
	}
	return decodeTokens(body)
}

// decodeTokens is DecodePayment reading the body token by token, as any
// body that decodePlain leaves is read.
func decodeTokens(body []byte) (PaymentRequest, error) {
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
		start := dec.InputOffset()
		tok, err = dec.Token()
		if err != nil {
			return bad("The body is not valid JSON: %s.", jsonError(err))
		}
		switch name {
		case "order_id":
			s, ok := tok.(string)
			if !ok {
				return bad("order_id must be a string, such as \"A-1001\".")
			}
			if err := checkOrderID(s, unpairedSurrogate(body[start:dec.InputOffset()])); err != nil {
				return PaymentRequest{}, err
			}
			req.OrderID = s
		case "amount_satang":
			n, ok := tok.(json.Number)
			if !ok {
				return bad("amount_satang must be a whole number of satang (1 baht = 100 satang), such as 129900.")
			}
			v, err := parseAmount(n.String())
			if err != nil {
				return PaymentRequest{}, err
			}
			req.AmountSatang = v
		default:
			return bad("Unknown field %q; the body takes only order_id and amount_satang.", Truncate(name, 40))
		}
	}
	if _, err := dec.Token(); err != nil {
		return bad("The body is not valid JSON: %s.", jsonError(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return bad("The body has data after the JSON object.")
	}
	if err := requireBoth(seen); err != nil {
		return PaymentRequest{}, err
	}
	return req, nil
}

// decodePlain reads the body nearly every client sends, without a JSON
// decoder: an object of exactly order_id and amount_satang, in either
// order, around and between which only JSON whitespace may stand, whose
// order id is 1 to MaxOrderIDLen printable ASCII characters with nothing
// escaped, and whose amount is a whole number from 1 to MaxAmountSatang
// written without a sign or leading zero. Such a body is one the decoder
// accepts, and decodes to the same request. ok is false for anything
// else, which is then left to the decoder: it alone refuses a body, with
// the message that names the problem. (Reading tokens with
// encoding/json's Decoder builds a syntax error at the end of every
// value, which it then throws away: most of a payment's parsing cost.)
func decodePlain(body []byte) (req PaymentRequest, ok bool) {
	i := skipSpace(body, 0)
	if i == len(body) || body[i] != '{' {
		return req, false
	}
	var haveOrder, haveAmount bool
	for n := 0; n < 2; n++ {
		i = skipSpace(body, i+1)
		const orderField, amountField = `"order_id"`, `"amount_satang"`
		var isOrder bool
		switch rest := body[i:]; {
		case len(rest) >= len(orderField) && string(rest[:len(orderField)]) == orderField && !haveOrder:
			isOrder, haveOrder, i = true, true, i+len(orderField)
		case len(rest) >= len(amountField) && string(rest[:len(amountField)]) == amountField && !haveAmount:
			haveAmount, i = true, i+len(amountField)
		default:
			return req, false
		}
		i = skipSpace(body, i)
		if i == len(body) || body[i] != ':' {
			return req, false
		}
		i = skipSpace(body, i+1)
		start := i
		if isOrder {
			if i == len(body) || body[i] != '"' {
				return req, false
			}
			for i++; i < len(body) && body[i] != '"'; i++ {
				if c := body[i]; c < 0x20 || c > 0x7e || c == '\\' {
					return req, false
				}
			}
			if i == len(body) || i-start-1 < 1 || i-start-1 > MaxOrderIDLen {
				return req, false
			}
			req.OrderID = string(body[start+1 : i])
			i++
		} else {
			for ; i < len(body) && body[i] >= '0' && body[i] <= '9'; i++ {
			}
			digits := body[start:i]
			if len(digits) == 0 || len(digits) > 11 || digits[0] == '0' {
				return req, false
			}
			var v int64
			for _, d := range digits {
				v = v*10 + int64(d-'0')
			}
			if v > MaxAmountSatang {
				return req, false
			}
			req.AmountSatang = v
		}
		i = skipSpace(body, i)
		if i == len(body) {
			return req, false
		}
		want := byte(',')
		if n == 1 {
			want = '}'
		}
		if body[i] != want {
			return req, false
		}
	}
	return req, skipSpace(body, i+1) == len(body)
}

// skipSpace returns the index of the first byte from i on that is not
// JSON whitespace.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// DecodePaymentForm parses a form-encoded payment body
// (application/x-www-form-urlencoded, as Stripe's SDKs send) as strictly
// as DecodePayment: exactly order_id and amount_satang, each once, with
// the same limits. It yields the same PaymentRequest as the JSON twin, so
// both encodings of one payment share one fingerprint.
func DecodePaymentForm(body []byte) (PaymentRequest, error) {
	var req PaymentRequest
	bad := func(format string, args ...any) (PaymentRequest, error) {
		return PaymentRequest{}, Errorf(EINVALID, format, args...)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return bad("The body is empty; send order_id=A-1001&amount_satang=129900.")
	}
	seen := map[string]bool{}
	for _, field := range bytes.Split(body, []byte("&")) {
		rawName, rawValue, hasValue := bytes.Cut(field, []byte("="))
		name, err := url.QueryUnescape(string(rawName))
		if err != nil {
			return bad("The form is not valid URL encoding: %s.", err)
		}
		value, err := url.QueryUnescape(string(rawValue))
		if err != nil {
			return bad("The form is not valid URL encoding: %s.", err)
		}
		switch {
		case name != "order_id" && name != "amount_satang":
			if !utf8.ValidString(name) {
				return bad("The form has a field name that is not UTF-8 text.")
			}
			return bad("Unknown field %q; the body takes only order_id and amount_satang.", Truncate(name, 40))
		case seen[name]:
			return bad("The field %q appears twice.", name)
		case !hasValue:
			return bad("The field %q has no value.", name)
		}
		seen[name] = true
		if name == "order_id" {
			if err := checkOrderID(value, false); err != nil {
				return PaymentRequest{}, err
			}
			req.OrderID = value
			continue
		}
		if !isInteger(value) {
			return bad("amount_satang must be a whole number of satang (1 baht = 100 satang), such as 129900.")
		}
		if req.AmountSatang, err = parseAmount(value); err != nil {
			return PaymentRequest{}, err
		}
	}
	if err := requireBoth(seen); err != nil {
		return PaymentRequest{}, err
	}
	return req, nil
}

// checkOrderID applies the limits on an order id, whichever encoding it
// came in. notText says the encoding held something that is not text,
// such as a JSON escape of half a surrogate pair, which a decoder quietly
// turns into U+FFFD: two different bodies would then share one
// fingerprint.
func checkOrderID(s string, notText bool) error {
	switch {
	case notText || !utf8.ValidString(s):
		return Errorf(EINVALID, "order_id is not valid UTF-8 text.")
	case s == "":
		return Errorf(EINVALID, "order_id must not be empty.")
	case len(s) > MaxOrderIDLen:
		return Errorf(EINVALID, "order_id is %d bytes long; the limit is %d.", len(s), MaxOrderIDLen)
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return Errorf(EINVALID, "order_id must not contain control characters.")
		}
	}
	return nil
}

// parseAmount reads an amount written as a JSON number or a form value:
// a positive whole number of satang within the limit.
func parseAmount(n string) (int64, error) {
	bad := func(format string, args ...any) (int64, error) { return 0, Errorf(EINVALID, format, args...) }
	v, err := strconv.ParseInt(n, 10, 64)
	switch {
	case err != nil && isInteger(n) && n[0] == '-':
		return bad("amount_satang must be positive, not %s.", Truncate(n, 24))
	case err != nil && isInteger(n):
		return bad("amount_satang is too large; the limit is %d satang.", MaxAmountSatang)
	case err != nil:
		return bad("amount_satang must be a whole number of satang, not %s: money is never a float.", Truncate(n, 24))
	case v <= 0:
		return bad("amount_satang must be positive, not %d.", v)
	case v > MaxAmountSatang:
		return bad("amount_satang is too large; the limit is %d satang.", MaxAmountSatang)
	}
	return v, nil
}

// unpairedSurrogate reports whether the JSON text raw escapes half of a
// UTF-16 surrogate pair (\ud800 alone, or \udc00 first): text no UTF-8
// string can hold.
func unpairedSurrogate(raw []byte) bool {
	high := false // the previous escape was a high surrogate
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' || i+1 >= len(raw) {
			if high {
				return true
			}
			continue
		}
		i++
		if raw[i] != 'u' || i+4 >= len(raw) {
			if high {
				return true
			}
			continue
		}
		r, err := strconv.ParseUint(string(raw[i+1:i+5]), 16, 16)
		i += 4
		if err != nil {
			continue // the decoder has refused it already
		}
		switch {
		case r >= 0xd800 && r < 0xdc00:
			if high {
				return true
			}
			high = true
		case r >= 0xdc00 && r < 0xe000:
			if !high {
				return true
			}
			high = false
		default:
			if high {
				return true
			}
		}
	}
	return high
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
	if !plainJSONString(p.OrderID) {
		b, _ := json.Marshal(p)
		return b
	}
	// What json.Marshal writes, without its reflection: the order id is
	// written as it is when Marshal would escape none of it.
	b := make([]byte, 0, len(`{"order_id":"","amount_satang":}`)+len(p.OrderID)+20)
	b = append(b, `{"order_id":"`...)
	b = append(b, p.OrderID...)
	b = append(b, `","amount_satang":`...)
	b = strconv.AppendInt(b, p.AmountSatang, 10)
	return append(b, '}')
}

// plainJSONString reports whether json.Marshal writes s between its
// quotes exactly as it is: printable ASCII, without the quote, the
// backslash, or the characters it escapes for HTML (<, >, &).
func plainJSONString(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c > 0x7e, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

// requireBoth is the rule both encodings share: a payment names its
// order and its amount, each exactly once (repeats are refused as they
// are read).
func requireBoth(seen map[string]bool) error {
	switch {
	case !seen["order_id"]:
		return Errorf(EINVALID, "order_id is missing.")
	case !seen["amount_satang"]:
		return Errorf(EINVALID, "amount_satang is missing.")
	}
	return nil
}

package pay

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestParseKey(t *testing.T) {
	long := strings.Repeat("k", 255)
	tests := []struct {
		name   string
		values []string
		want   string
		code   Code
	}{
		{"a quoted structured-field string is accepted", []string{`"8e03978e-40d5-43e8-bc93-6894a57f9324"`}, "8e03978e-40d5-43e8-bc93-6894a57f9324", ""},
		{"the bare form Stripe sends is accepted", []string{"8e03978e-40d5-43e8-bc93-6894a57f9324"}, "8e03978e-40d5-43e8-bc93-6894a57f9324", ""},
		{"escaped quote and backslash are decoded", []string{`"a\"b\\c"`}, `a"b\c`, ""},
		{"255 characters are accepted", []string{long}, long, ""},
		{"surrounding whitespace is ignored", []string{"  abc \t"}, "abc", ""},
		{"no header is missing", nil, "", EMISSINGKEY},
		{"an empty header is missing", []string{""}, "", EMISSINGKEY},
		{"an empty quoted string is invalid", []string{`""`}, "", EINVALIDKEY},
		{"two header lines are invalid", []string{"a", "b"}, "", EINVALIDKEY},
		{"256 characters are too long", []string{long + "k"}, "", EINVALIDKEY},
		{"256 quoted characters are too long", []string{`"` + long + `k"`}, "", EINVALIDKEY},
		{"an unterminated quote is invalid", []string{`"abc`}, "", EINVALIDKEY},
		{"a lone backslash is invalid", []string{`"abc\`}, "", EINVALIDKEY},
		{"an unknown escape is invalid", []string{`"a\nb"`}, "", EINVALIDKEY},
		{"text after the closing quote is invalid", []string{`"abc";x=1`}, "", EINVALIDKEY},
		{"a control character is invalid", []string{"ab\x01c"}, "", EINVALIDKEY},
		{"a control character inside quotes is invalid", []string{"\"ab\x7fc\""}, "", EINVALIDKEY},
		{"a space inside a quoted key is invalid", []string{`"a b"`}, "", EINVALIDKEY},
		{"unicode is invalid", []string{"clé"}, "", EINVALIDKEY},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseKey(tt.values)
			if tt.code != "" {
				if ErrorCode(err) != tt.code {
					t.Fatalf("got %q, %v; want code %s", got, err, tt.code)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func FuzzParseKey(f *testing.F) {
	for _, s := range []string{`"8e03978e-40d5-43e8-bc93-6894a57f9324"`, "abc", `"a\"b"`, `"\\"`, `"abc`, `"abc\`, "a\x00b",
		"\t", `""`, strings.Repeat("x", 256), `"` + strings.Repeat("x", 255) + `"`, "ключ", `"a";b`, "a, b", "\"\xff\""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		key, err := ParseKey([]string{v})
		if err != nil {
			if c := ErrorCode(err); c != EINVALIDKEY && c != EMISSINGKEY {
				t.Fatalf("unexpected code %s", c)
			}
			return
		}
		if len(key) < 1 || len(key) > MaxKeyLength {
			t.Fatalf("accepted a key of length %d", len(key))
		}
		for i := 0; i < len(key); i++ {
			if key[i] < 0x21 || key[i] > 0x7e {
				t.Fatalf("accepted byte %#x", key[i])
			}
		}
		// Both accepted forms of the same key parse to the same key.
		if !strings.ContainsAny(key, `"\`) {
			if again, err := ParseKey([]string{`"` + key + `"`}); err != nil || again != key {
				t.Fatalf("quoted form of %q parsed as %q, %v", key, again, err)
			}
		}
	})
}

func TestDecodePayment(t *testing.T) {
	ok := []struct{ name, body string }{
		{"the article's body", `{"order_id": "A-1001", "amount_satang": 129900}`},
		{"fields in the other order", `{"amount_satang": 129900, "order_id": "A-1001"}`},
		{"extra whitespace", " {\n\"order_id\" : \"A-1001\" ,\t\"amount_satang\":129900 } \n"},
	}
	for _, tt := range ok {
		t.Run(tt.name+" is accepted", func(t *testing.T) {
			p, err := DecodePayment([]byte(tt.body))
			if err != nil || p.OrderID != "A-1001" || p.AmountSatang != 129900 {
				t.Fatalf("got %+v, %v", p, err)
			}
		})
	}
	bad := []struct{ name, body, mention string }{
		{"a float amount", `{"order_id": "A", "amount_satang": 1.5}`, "whole number"},
		{"a float written as a whole", `{"order_id": "A", "amount_satang": 100.0}`, "whole number"},
		{"an exponent", `{"order_id": "A", "amount_satang": 1e5}`, "whole number"},
		{"a negative amount", `{"order_id": "A", "amount_satang": -1}`, "positive"},
		{"a huge negative amount", `{"order_id": "A", "amount_satang": -99999999999999999999999}`, "positive"},
		{"a zero amount", `{"order_id": "A", "amount_satang": 0}`, "positive"},
		{"an amount beyond int64", `{"order_id": "A", "amount_satang": 99999999999999999999999}`, "too large"},
		{"an amount beyond the limit", `{"order_id": "A", "amount_satang": 10000000001}`, "too large"},
		{"a string amount", `{"order_id": "A", "amount_satang": "100"}`, "whole number"},
		{"a null amount", `{"order_id": "A", "amount_satang": null}`, "whole number"},
		{"a missing amount", `{"order_id": "A"}`, "amount_satang is missing"},
		{"a missing order", `{"amount_satang": 1}`, "order_id is missing"},
		{"an empty order", `{"order_id": "", "amount_satang": 1}`, "empty"},
		{"a numeric order", `{"order_id": 7, "amount_satang": 1}`, "string"},
		{"a control character in the order", `{"order_id": "A\u0001", "amount_satang": 1}`, "control"},
		{"an unknown field", `{"order_id": "A", "amount_satang": 1, "currency": "THB"}`, "Unknown field"},
		{"a repeated field", `{"order_id": "A", "order_id": "B", "amount_satang": 1}`, "twice"},
		{"an array", `[1]`, "object"},
		{"trailing data", `{"order_id": "A", "amount_satang": 1} {}`, "after"},
		{"a truncated body", `{"order_id": "A", "amount_satang": 1`, "JSON"},
		{"an empty body", ``, "empty"},
		{"invalid UTF-8", "{\"order_id\": \"\xff\", \"amount_satang\": 1}", "UTF-8"},
	}
	for _, tt := range bad {
		t.Run(tt.name+" is refused", func(t *testing.T) {
			_, err := DecodePayment([]byte(tt.body))
			if ErrorCode(err) != EINVALID || !strings.Contains(err.Error(), tt.mention) {
				t.Fatalf("got %v, want EINVALID mentioning %q", err, tt.mention)
			}
		})
	}
}

func FuzzDecodePayment(f *testing.F) {
	for _, s := range []string{`{"order_id": "A-1001", "amount_satang": 129900}`, `{"order_id": "A", "amount_satang": 1.5}`,
		`{"order_id": "A", "amount_satang": 1e400}`, `{"order_id": "A", "amount_satang": 99999999999999999999}`,
		`{"order_id": "A", "amount_satang": -0}`, `{"order_id": "\u0000", "amount_satang": 1}`, `{"order_id": "ก", "amount_satang": 1}`,
		`{"order_id": "A", "amount_satang": 1, "x": {"y": [1, 2]}}`, `{"a":`, `[]`, `null`, `"x"`, "{\"order_id\": \"\xed\xa0\x80\"}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := DecodePayment(body)
		if err != nil {
			if ErrorCode(err) != EINVALID {
				t.Fatalf("code %s for %q", ErrorCode(err), body)
			}
			return
		}
		if p.AmountSatang <= 0 || p.AmountSatang > MaxAmountSatang || p.OrderID == "" || len(p.OrderID) > MaxOrderIDLen {
			t.Fatalf("accepted %+v", p)
		}
		// A body read without the decoder is one the decoder reads the
		// same way.
		if _, plain := decodePlain(body); plain {
			if full, err := decodeTokens(body); err != nil || full != p {
				t.Fatalf("%q read as %+v, but the decoder reads %+v, %v", body, p, full, err)
			}
		}
		// The canonical form decodes to the same request: the fingerprint
		// depends only on what was asked.
		again, err := DecodePayment(p.Canonical())
		if err != nil || again != p {
			t.Fatalf("canonical form %s decodes to %+v, %v", p.Canonical(), again, err)
		}
		var m map[string]any
		if json.Unmarshal(body, &m) != nil {
			t.Fatalf("accepted a body encoding/json refuses: %q", body)
		}
		if marshaled, _ := json.Marshal(p); string(marshaled) != string(p.Canonical()) {
			t.Fatalf("canonical form %s, json.Marshal writes %s", p.Canonical(), marshaled)
		}
	})
}

// TestPlainBodiesAreReadAsTheDecoderReadsThem: the bodies read without
// the JSON decoder, and those left to it, give what the decoder gives.
func TestPlainBodiesAreReadAsTheDecoderReadsThem(t *testing.T) {
	for _, tt := range []struct {
		body  string
		plain bool // read without the decoder
	}{
		{`{"order_id":"A-1001","amount_satang":129900}`, true},
		{`{"amount_satang": 129900, "order_id": "A-1001"}`, true},
		{" {\n\"order_id\" : \"A 1001~!\" ,\t\"amount_satang\":10000000000 }\r\n", true},
		{`{"order_id":"` + strings.Repeat("x", 64) + `","amount_satang":1}`, true},
		{`{"order_id":"` + strings.Repeat("x", 65) + `","amount_satang":1}`, false},
		{`{"order_id":"A","amount_satang":10000000001}`, false},
		{`{"order_id":"A","amount_satang":012}`, false},
		{`{"order_id":"A","amount_satang":0}`, false},
		{`{"order_id":"A","amount_satang":-1}`, false},
		{`{"order_id":"A","amount_satang":1.0}`, false},
		{`{"order_id":"A","amount_satang":1e2}`, false},
		{`{"order_id":"A\u0042","amount_satang":1}`, false},
		{`{"order_id":"A\"","amount_satang":1}`, false},
		{`{"order_id":"ก","amount_satang":1}`, false},
		{`{"order_id":"","amount_satang":1}`, false},
		{`{"order_id":"A","order_id":"B"}`, false},
		{`{"order_id":"A","amount_satang":1,}`, false},
		{`{"order_id":"A","amount_satang":1} x`, false},
		{`{"order_id":"A"}`, false},
		{`{"order_id":"A","amount_satang":1,"x":1}`, false},
		{`{"order_id" "A","amount_satang":1}`, false},
		{`{"order_id":"A" "amount_satang":1}`, false},
		{`{"order_id":"A","amount_satang":1`, false},
		{`{"order_i":"A","amount_satang":1}`, false},
		{"\ufeff" + `{"order_id":"A","amount_satang":1}`, false},
		{``, false},
	} {
		got, plain := decodePlain([]byte(tt.body))
		if plain != tt.plain {
			t.Errorf("%q: read without the decoder %v, want %v", tt.body, plain, tt.plain)
		}
		want, err := decodeTokens([]byte(tt.body))
		if plain && (err != nil || got != want) {
			t.Errorf("%q: read as %+v, the decoder reads %+v, %v", tt.body, got, want, err)
		}
		again, err2 := DecodePayment([]byte(tt.body))
		if again != want || (err == nil) != (err2 == nil) || (err != nil && err.Error() != err2.Error()) {
			t.Errorf("%q: DecodePayment gives %+v, %v; the decoder %+v, %v", tt.body, again, err2, want, err)
		}
	}
}

// TestCanonicalIsWhatJSONMarshalWrites: the fingerprints of requests
// already saved must not change.
func TestCanonicalIsWhatJSONMarshalWrites(t *testing.T) {
	for _, id := range []string{"A-1001", "a b~!?", `a"b`, `a\b`, "<b>&", "ก", "a\u2028b", "\x01", "\x7f", "\xff", ""} {
		p := PaymentRequest{OrderID: id, AmountSatang: 129900}
		want, _ := json.Marshal(p)
		if got := p.Canonical(); string(got) != string(want) {
			t.Errorf("%q: canonical %s, json.Marshal %s", id, got, want)
		}
	}
}

// TestResponseBodyIsWhatJSONMarshalWrites: a replay sends the bytes a
// live request sent, whichever version saved them.
func TestResponseBodyIsWhatJSONMarshalWrites(t *testing.T) {
	at := time.Date(2026, 11, 30, 9, 1, 2, 345678900, time.FixedZone("ICT", 7*3600))
	for _, c := range []Charge{
		{ID: "ch_0123456789abcdef01234567", OrderID: "A-1001", AmountSatang: 129900, GatewayRef: "gw_ab", CreatedAt: at},
		{ID: "ch_1", OrderID: "<A&B>", AmountSatang: 1, GatewayRef: "gw_1", CreatedAt: at.Truncate(time.Second)},
		{ID: "ch_1", OrderID: "ก", AmountSatang: 1, GatewayRef: "gw_1", CreatedAt: time.Time{}},
		{ID: "ch_1", OrderID: "A", AmountSatang: 1, GatewayRef: "gw_1", CreatedAt: time.Date(12000, 1, 1, 0, 0, 0, 0, time.UTC)},
	} {
		want := c.marshalResponseBody(c.CreatedAt.UTC().Truncate(time.Millisecond))
		if got := c.ResponseBody(); string(got) != string(want) {
			t.Errorf("%+v: body %s, json.Marshal %s", c, got, want)
		}
	}
}

// TestResponseBodyIsOneAllocationThatFits: the replay cache keeps a body
// for each of its newest keys, so the room the body was built in is
// memory kept. It is one allocation, at most 25 bytes larger than the
// body (an amount's digits not written, the time's fraction trimmed),
// however long its amount.
func TestResponseBodyIsOneAllocationThatFits(t *testing.T) {
	at := time.Date(2026, 12, 6, 15, 41, 38, 123456789, time.UTC)
	for _, amount := range []int64{1000, 129900, math.MinInt64} {
		c := Charge{ID: NewID("ch_"), OrderID: "0b8f4a52-1f0c-4c1e-9a53-3f6c2d7e8a91", AmountSatang: amount, GatewayRef: NewID("gw_"), CreatedAt: at}
		body := c.ResponseBody()
		if room := cap(body) - len(body); room < 0 || room > 25 {
			t.Errorf("amount %d: a body of %d bytes in %d bytes of room", amount, len(body), cap(body))
		}
		if allocs := testing.AllocsPerRun(100, func() { body = c.ResponseBody() }); allocs != 1 {
			t.Errorf("amount %d: %v allocations a body, want 1", amount, allocs)
		}
	}
}

func TestDecodePaymentRefusesTextThatIsNotUTF8(t *testing.T) {
	for _, body := range []string{
		`{"order_id": "A-\ud800", "amount_satang": 1}`,
		`{"order_id": "A-\udc00", "amount_satang": 1}`,
		`{"order_id": "A-\ud800\u0041", "amount_satang": 1}`,
		`{"order_id": "A-\ud800\ud800", "amount_satang": 1}`,
	} {
		t.Run(body+" is refused", func(t *testing.T) {
			_, err := DecodePayment([]byte(body))
			if ErrorCode(err) != EINVALID || !strings.Contains(err.Error(), "UTF-8") {
				t.Fatalf("got %v, want EINVALID mentioning UTF-8", err)
			}
		})
	}
	for _, tt := range []struct{ body, want string }{
		{`{"order_id": "A-\ud83d\ude00", "amount_satang": 1}`, "A-😀"},
		{`{"order_id": "A-\ufffd", "amount_satang": 1}`, "A-\ufffd"},
		{`{"order_id": "A-\\ud800", "amount_satang": 1}`, `A-\ud800`},
	} {
		t.Run(tt.body+" is accepted", func(t *testing.T) {
			p, err := DecodePayment([]byte(tt.body))
			if err != nil || p.OrderID != tt.want {
				t.Fatalf("got %+v, %v; want order %q", p, err, tt.want)
			}
		})
	}
}

func TestDecodePaymentForm(t *testing.T) {
	for _, body := range []string{
		"order_id=A-1001&amount_satang=129900",
		"amount_satang=129900&order_id=A-1001",
		"order_id=A%2D1001&amount_satang=129900",
	} {
		t.Run(body+" is the JSON body's twin", func(t *testing.T) {
			p, err := DecodePaymentForm([]byte(body))
			if err != nil || p != (PaymentRequest{OrderID: "A-1001", AmountSatang: 129900}) {
				t.Fatalf("got %+v, %v", p, err)
			}
			j, _ := DecodePayment([]byte(`{"order_id": "A-1001", "amount_satang": 129900}`))
			if Fingerprint("POST", "/v1/payments", p.Canonical()) != Fingerprint("POST", "/v1/payments", j.Canonical()) {
				t.Fatal("the form and JSON bodies have different fingerprints")
			}
		})
	}
	bad := []struct{ name, body, mention string }{
		{"an empty body", "", "empty"},
		{"an unknown field", "order_id=A&amount_satang=1&currency=THB", "Unknown field"},
		{"a repeated field", "order_id=A&order_id=B&amount_satang=1", "twice"},
		{"a missing amount", "order_id=A", "amount_satang is missing"},
		{"a missing order", "amount_satang=1", "order_id is missing"},
		{"a field without a value", "order_id&amount_satang=1", "no value"},
		{"an empty order", "order_id=&amount_satang=1", "empty"},
		{"a float amount", "order_id=A&amount_satang=1.5", "whole number"},
		{"an exponent", "order_id=A&amount_satang=1e5", "whole number"},
		{"a plus sign", "order_id=A&amount_satang=%2B5", "whole number"},
		{"a negative amount", "order_id=A&amount_satang=-1", "positive"},
		{"a zero amount", "order_id=A&amount_satang=0", "positive"},
		{"an amount beyond the limit", "order_id=A&amount_satang=10000000001", "too large"},
		{"invalid UTF-8 in the order", "order_id=A%FF&amount_satang=1", "UTF-8"},
		{"a control character in the order", "order_id=A%01&amount_satang=1", "control"},
		{"a bad escape", "order_id=A%zz&amount_satang=1", "URL encoding"},
		{"a trailing ampersand", "order_id=A&amount_satang=1&", "Unknown field"},
		{"Stripe's nested metadata", "order_id=A&amount_satang=1&metadata[x]=y", "Unknown field"},
	}
	for _, tt := range bad {
		t.Run(tt.name+" is refused", func(t *testing.T) {
			_, err := DecodePaymentForm([]byte(tt.body))
			if ErrorCode(err) != EINVALID || !strings.Contains(err.Error(), tt.mention) {
				t.Fatalf("got %v, want EINVALID mentioning %q", err, tt.mention)
			}
		})
	}
}

func FuzzDecodePaymentForm(f *testing.F) {
	for _, s := range []string{"order_id=A-1001&amount_satang=129900", "order_id=A%FF&amount_satang=1", "order_id=+&amount_satang=007",
		"order_id=%E0%B8%81&amount_satang=1", "a=b", "&&", "order_id=A&amount_satang=99999999999999999999", "%", "order_id=%ef%bf%bd&amount_satang=1"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := DecodePaymentForm(body)
		if err != nil {
			if ErrorCode(err) != EINVALID {
				t.Fatalf("code %s for %q", ErrorCode(err), body)
			}
			return
		}
		if p.AmountSatang <= 0 || p.AmountSatang > MaxAmountSatang || p.OrderID == "" || len(p.OrderID) > MaxOrderIDLen {
			t.Fatalf("accepted %+v", p)
		}
		// What the form said, the JSON twin says too: one request, one
		// fingerprint, whichever encoding carried it.
		twin, err := DecodePayment(p.Canonical())
		if err != nil || twin != p {
			t.Fatalf("form %q gave %+v, whose JSON twin decodes to %+v, %v", body, p, twin, err)
		}
	})
}

func TestTruncateCutsBetweenCharacters(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"abcdef", 3, "abc…"},
		{"ab฿cd", 3, "ab…"}, // ฿ is three bytes: the cut moves back before it
		{"ab฿cd", 5, "ab฿…"},
		{"฿฿", 1, "…"},
	} {
		got := Truncate(tc.in, tc.n)
		if got != tc.want || !utf8.ValidString(got) {
			t.Errorf("Truncate(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

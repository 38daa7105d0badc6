package pay

import "testing"

func TestPersonalData(t *testing.T) {
	for _, tc := range []struct{ key, want string }{
		{"somchai.j@example.com", "an e-mail address"},
		{"session:ab12|somchai.j@example.co.th", "an e-mail address"},
		{"+66812345678", "a phone number"},
		{"081-234-5678", "a phone number"},
		{"token:9f|(02)123-4567", "a phone number"},
		{"8e03978e-40d5-43e8-bc93-6894a57f9324", ""},
		{"12345678-1234-1234-1234-123456789012", ""},
		{"order-A-1001", ""},
		{"lab no-key rq_1a2b3c4d", ""},
		{"user@localhost", ""},
		{"1234567", ""},
		{"bench-1a2b3c4d-123456789", ""},
		{"bench-1a2b3c4d|0812345678", "a phone number"},
	} {
		if got := PersonalData(tc.key); got != tc.want {
			t.Errorf("PersonalData(%q) = %q, want %q", tc.key, got, tc.want)
		}
	}
}

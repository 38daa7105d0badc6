package pay

// The limits of a payment's fields, for a protocol that carries them in
// a body of its own (the Stripe-shaped sandbox's form).

// ParseAmountSatang reads an amount written as digits: a positive whole
// number of satang within the limit.
func ParseAmountSatang(s string) (int64, error) {
	if !isInteger(s) {
		return 0, Errorf(EINVALID, "The amount must be a whole number of satang, written as digits.")
	}
	return parseAmount(s)
}

// CheckOrderID applies the limits on an order id: 1 to MaxOrderIDLen
// bytes of UTF-8 text without control characters.
func CheckOrderID(s string) error { return checkOrderID(s, false) }

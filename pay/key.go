package pay

import (
	"strings"
	"unicode/utf8"
)

// MaxKeyLength is the longest idempotency key accepted, as Stripe allows.
const MaxKeyLength = 255

// ParseKey reads the Idempotency-Key header's values. It
// accepts the IETF draft's form, a Structured Field String ("…" with \"
// and \\ escapes), and the bare form Stripe sends. Either way the key is
// 1–255 visible ASCII characters; "abc" and abc are the same key.
// Exactly one header line is allowed: two lines could be two clients'
// keys joined by a proxy, and guessing would risk the wrong replay.
func ParseKey(values []string) (string, error) {
	switch len(values) {
	case 0:
		return "", Errorf(EMISSINGKEY, "This endpoint needs an Idempotency-Key header: create one random key (a UUID) per payment and send it on every retry.")
	case 1:
	default:
		return "", Errorf(EINVALIDKEY, "The Idempotency-Key header was sent %d times; send it exactly once.", len(values))
	}
	v := strings.Trim(values[0], " \t")
	if v == "" {
		return "", Errorf(EMISSINGKEY, "The Idempotency-Key header is empty: send 1 to %d visible ASCII characters, such as a UUID.", MaxKeyLength)
	}
	var key string
	if v[0] == '"' {
		var err error
		if key, err = unquoteSFString(v); err != nil {
			return "", err
		}
	} else {
		key = v
	}
	if key == "" {
		return "", Errorf(EINVALIDKEY, "The Idempotency-Key is an empty string: send 1 to %d visible ASCII characters.", MaxKeyLength)
	}
	if len(key) > MaxKeyLength {
		return "", Errorf(EINVALIDKEY, "The Idempotency-Key is %d characters long; the limit is %d.", len(key), MaxKeyLength)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x21 || c > 0x7e {
			return "", Errorf(EINVALIDKEY, "The Idempotency-Key contains %s at position %d; only visible ASCII characters (no spaces, no control characters, no Unicode) are allowed.", describeByte(c), i+1)
		}
	}
	return key, nil
}

// unquoteSFString decodes an RFC 8941 sf-string that must make up the
// whole value: a parameter or a second list member after it is refused.
func unquoteSFString(v string) (string, error) {
	var b strings.Builder
	b.Grow(min(len(v), MaxKeyLength+2)) // one allocation, not one per doubling
	for i := 1; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '\\':
			i++
			if i == len(v) {
				return "", Errorf(EINVALIDKEY, "The quoted Idempotency-Key ends in a lone backslash.")
			}
			if v[i] != '"' && v[i] != '\\' {
				return "", Errorf(EINVALIDKEY, `The quoted Idempotency-Key uses the escape \%c; only \" and \\ are allowed.`, v[i])
			}
			b.WriteByte(v[i])
		case c == '"':
			if rest := v[i+1:]; rest != "" {
				return "", Errorf(EINVALIDKEY, "The Idempotency-Key has %q after its closing quote; send a single quoted string.", Truncate(rest, 20))
			}
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return "", Errorf(EINVALIDKEY, "The quoted Idempotency-Key contains %s at position %d.", describeByte(c), i+1)
		default:
			if b.Len() > MaxKeyLength {
				return "", Errorf(EINVALIDKEY, "The Idempotency-Key is longer than %d characters.", MaxKeyLength)
			}
			b.WriteByte(c)
		}
	}
	return "", Errorf(EINVALIDKEY, "The Idempotency-Key opens a quote that never closes.")
}

func describeByte(c byte) string {
	switch {
	case c == ' ':
		return "a space"
	case c < 0x20 || c == 0x7f:
		return "a control character"
	case c >= 0x80:
		return "a non-ASCII byte"
	}
	return "the character " + string(rune(c))
}

// Truncate shortens s to at most n bytes for an error message, marking the
// cut: a message quotes what the client sent, which may be long. The cut
// falls between characters, so a quote of valid UTF-8 stays valid.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

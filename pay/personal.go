package pay

import (
	"regexp"
	"strings"
)

// Personal data in keys. A key is meant to be random; these patterns find
// the two kinds of personal data that people most often use instead. The
// lab counts such keys (mistake 6) and the live page flags them.
var (
	emailPattern = regexp.MustCompile(`[A-Za-z0-9._%+\-]+@[A-Za-z0-9\-]+(\.[A-Za-z0-9\-]+)*\.[A-Za-z]{2,}`)
	phonePattern = regexp.MustCompile(`^\+?\(?[0-9][0-9().\-]{6,22}[0-9]$`)
)

// PersonalData says what kind of personal data a key looks like it holds
// ("an e-mail address", "a phone number"), or "" when it looks like none.
// It also finds them inside composite keys, such as the gateway's
// "scope|key".
func PersonalData(key string) string {
	if strings.Contains(key, "@") && emailPattern.MatchString(key) {
		return "an e-mail address"
	}
	if countDigits(key) < 9 {
		return "" // too few digits for a phone number: most keys stop here
	}
	for tok := range strings.FieldsFuncSeq(key, func(r rune) bool {
		return r == '|' || r == ' ' || r == ':' || r == '/' || r == '_' || r == ','
	}) {
		// Most keys with digits enough (a UUID) have a letter in every
		// part: no phone number, and no need to run the pattern.
		if !onlyPhoneCharacters(tok) || !phonePattern.MatchString(tok) {
			continue
		}
		if digits := countDigits(tok); digits >= 9 && digits <= 15 {
			return "a phone number"
		}
	}
	return ""
}

// onlyPhoneCharacters reports whether s holds only characters that
// phonePattern allows.
func onlyPhoneCharacters(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9', c == '+', c == '(', c == ')', c == '.', c == '-':
		default:
			return false
		}
	}
	return true
}

func countDigits(s string) int {
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] >= '0' && s[i] <= '9' {
			n++
		}
	}
	return n
}

package views

import (
	"fmt"
	"net/http"
	"strconv"
)

// statusText renders a status as "404 Not Found".
func statusText(status int) string {
	return strconv.Itoa(status) + " " + http.StatusText(status)
}

// Baht formats satang as baht with two decimals and thousands separators:
// 129900 → "1,299.00".
func Baht(satang int64) string {
	neg := satang < 0
	if neg {
		satang = -satang
	}
	whole, frac := satang/100, satang%100
	s := strconv.FormatInt(whole, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	out := fmt.Sprintf("%s.%02d", s, frac)
	if neg {
		out = "-" + out
	}
	return out
}

// timesWord says how many times in words: "twice", "three times".
func timesWord(n int) string {
	words := []string{"never", "once", "twice", "three times", "four times", "five times", "six times", "seven times", "eight times", "nine times", "ten times"}
	if n >= 0 && n < len(words) {
		return words[n]
	}
	return strconv.Itoa(n) + " times"
}

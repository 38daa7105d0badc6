package views

import (
	"math"
	"strconv"
	"strings"
)

// Formatting and naming shared by the backoff and herd pages (and the CLI,
// which prints the same numbers).

// Seconds prints a number of seconds the way the article writes them:
// 0.5, 0.25, 15.5, 7.75; at most three decimals, and three significant
// digits below 0.01 s.
func Seconds(v float64) string {
	switch {
	case !isFinite(v):
		return "–"
	case v == 0:
		return "0"
	case math.Abs(v) < 0.01:
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
	s := strconv.FormatFloat(v, 'f', 3, 64)
	return strings.TrimRight(strings.TrimRight(s, "0"), ".")
}

// SecondsSig prints seconds to three significant digits: 104, 7.73,
// 0.376. The herd's times are averages of noisy runs; more digits would be
// noise.
func SecondsSig(v float64) string {
	switch {
	case !isFinite(v):
		return "–"
	case v == 0:
		return "0"
	case math.Abs(v) >= 100:
		return chartGroupThousands(int64(math.Round(v)))
	}
	s := strconv.FormatFloat(v, 'g', 3, 64)
	if strings.ContainsAny(s, "e") { // tiny values
		return strconv.FormatFloat(v, 'f', 4, 64)
	}
	return s
}

// Millis prints whole milliseconds with thousands separators.
func Millis(ms int64) string { return chartGroupThousands(ms) }

// Count prints a whole number with thousands separators.
func Thousands(n int) string { return chartGroupThousands(int64(n)) }

// Rate prints a load in requests per millisecond: 2, 0.5, 1,000.
func Rate(v float64) string {
	switch {
	case !isFinite(v):
		return "–"
	case v >= 100 || v == math.Trunc(v):
		return chartGroupThousands(int64(math.Round(v)))
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	s := strconv.FormatFloat(v, 'f', 2, 64)
	return strings.TrimRight(strings.TrimRight(s, "0"), ".")
}

// StrategyLabel is the human name of a backoff strategy.
func StrategyLabel(s string) string {
	switch s {
	case "none":
		return "No backoff"
	case "exponential":
		return "Exponential, no jitter"
	case "full":
		return "Full jitter"
	case "equal":
		return "Equal jitter"
	case "decorrelated":
		return "Decorrelated jitter"
	}
	return s
}

// StrategyFormula is the wait before a retry, with c = min(cap, base·2^n).
func StrategyFormula(s string) string {
	switch s {
	case "none":
		return "wait = 0 (retry at once)"
	case "exponential":
		return "wait = c"
	case "full":
		return "wait = uniform(0, c)"
	case "equal":
		return "wait = c/2 + uniform(0, c/2)"
	case "decorrelated":
		return "wait = min(cap, uniform(base, 3 × previous wait)), first previous = base"
	}
	return ""
}

// SelectOption is one choice of a select element.
type SelectOption struct{ Value, Label string }

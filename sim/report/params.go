package report

import (
	"errors"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"paytwice/sim"
)

// Parsing of the backoff and herd parameters. The page form, the JSON API
// and the CLI all go through these functions, so a bad value gets the same
// message everywhere, and the message names the field.

// FieldError is one bad parameter: its name as in the query string (and the
// form, and the CLI flag) and what is wrong with it, in words a student can
// act on.
type FieldError struct {
	Field string `json:"field"`
	Msg   string `json:"message"`
}

// FieldErrors is every bad parameter of one request, in form order.
type FieldErrors []FieldError

// Error lists the fields and their messages.
func (fe FieldErrors) Error() string {
	parts := make([]string, len(fe))
	for i, e := range fe {
		parts[i] = e.Field + ": " + e.Msg
	}
	return strings.Join(parts, "; ")
}

// ByField maps each field to its first message, as a form shows them.
func (fe FieldErrors) ByField() map[string]string {
	m := make(map[string]string, len(fe))
	for _, e := range fe {
		if _, dup := m[e.Field]; !dup {
			m[e.Field] = e.Msg
		}
	}
	return m
}

// inOrder sorts the errors by the position of their field in names (the
// form's order), keeping the order of errors on the same field.
func (fe FieldErrors) inOrder(names ...string) FieldErrors {
	pos := func(f string) int {
		for i, n := range names {
			if n == f {
				return i
			}
		}
		return len(names)
	}
	slices.SortStableFunc(fe, func(a, b FieldError) int { return pos(a.Field) - pos(b.Field) })
	return fe
}

func (fe FieldErrors) has(field string) bool {
	for _, e := range fe {
		if e.Field == field {
			return true
		}
	}
	return false
}

// paramReader reads typed values from a query, collecting errors.
type paramReader struct {
	q    url.Values
	errs FieldErrors
}

func (r *paramReader) fail(field, format string, args ...any) {
	r.errs = append(r.errs, FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
}

// raw returns the trimmed value, whether the parameter was given at all, and
// records an error when it was given empty (a cleared form field).
func (r *paramReader) raw(name, what string) (string, bool) {
	vs, ok := r.q[name]
	if !ok {
		return "", false
	}
	if len(vs) > 1 {
		r.fail(name, "give it once, not %d times", len(vs))
		return "", false
	}
	v := strings.TrimSpace(vs[0])
	if v == "" {
		r.fail(name, "enter %s", what)
		return "", false
	}
	return v, true
}

// seconds reads a positive number of seconds in [lo, hi]; a Go duration
// such as 500ms is accepted too.
func (r *paramReader) seconds(name string, def, lo, hi time.Duration) time.Duration {
	v, ok := r.raw(name, "a number of seconds, such as 0.5")
	if !ok {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		d, derr := time.ParseDuration(v)
		if derr != nil {
			r.fail(name, "%q is not a number of seconds (try 0.5)", clip(v))
			return def
		}
		f = d.Seconds()
	}
	switch {
	case math.IsNaN(f) || math.IsInf(f, 0):
		r.fail(name, "%q is not a number of seconds (try 0.5)", clip(v))
	case f < 0:
		r.fail(name, "must not be negative")
	case f < lo.Seconds():
		r.fail(name, "must be at least %s s", seconds(lo.Seconds()))
	case f > hi.Seconds():
		r.fail(name, "must be at most %s s", thousands(int64(hi.Seconds())))
	default:
		return time.Duration(math.Round(f * float64(time.Second)))
	}
	return def
}

// integer reads a whole number in [lo, hi].
func (r *paramReader) integer(name string, def, lo, hi int) int {
	v, ok := r.raw(name, "a whole number")
	if !ok {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	var ne *strconv.NumError
	switch {
	case errors.As(err, &ne) && ne.Err == strconv.ErrRange && !strings.HasPrefix(v, "-"):
		r.fail(name, "must be at most %s", thousands(int64(hi)))
	case err != nil && strings.HasPrefix(v, "-"):
		r.fail(name, "must not be negative")
	case err != nil:
		if _, ferr := strconv.ParseFloat(v, 64); ferr == nil {
			r.fail(name, "must be a whole number, not %s", clip(v))
		} else {
			r.fail(name, "%q is not a number", clip(v))
		}
	case n < 0 && lo >= 0:
		r.fail(name, "must not be negative")
	case n < int64(lo):
		r.fail(name, "must be at least %s", thousands(int64(lo)))
	case n > int64(hi):
		r.fail(name, "must be at most %s", thousands(int64(hi)))
	default:
		return int(n)
	}
	return def
}

// seed reads any unsigned 64-bit number.
func (r *paramReader) seed(name string, def uint64) uint64 {
	v, ok := r.raw(name, "a whole number")
	if !ok {
		return def
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		switch {
		case strings.HasPrefix(v, "-"):
			r.fail(name, "must not be negative")
		default:
			r.fail(name, "must be a whole number from 0 to %d", uint64(math.MaxUint64))
		}
		return def
	}
	return n
}

// strategy reads a strategy name.
func (r *paramReader) strategy(name string, def sim.Strategy) sim.Strategy {
	v, ok := r.raw(name, "a strategy")
	if !ok {
		return def
	}
	st, err := sim.ParseStrategy(v)
	if err != nil {
		r.fail(name, "unknown strategy %q; choose none, exponential, full, equal or decorrelated", clip(v))
		return def
	}
	return st
}

// simFieldError maps a *sim.ParamError onto the form's field names.
func simFieldError(err error) FieldError {
	pe, ok := err.(*sim.ParamError)
	if !ok {
		return FieldError{Field: "request", Msg: err.Error()}
	}
	field := map[string]string{"max_retries": "retries", "min_clients": "min", "max_clients": "max"}[pe.Field]
	if field == "" {
		field = pe.Field
	}
	return FieldError{Field: field, Msg: pe.Msg}
}

// clip shortens what a user typed before a message quotes it.
func clip(s string) string {
	const n = 20
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// seconds prints a number of seconds as short as it reads exactly: 0.5,
// 8, 0.001, 0.12345; a message quotes back what the user typed.
func seconds(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// secondsText prints a duration in seconds: "0.5", "8".
func secondsText(d time.Duration) string { return seconds(d.Seconds()) }

// thousands prints 100000 as "100,000".
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		s = "-" + s
	}
	return s
}

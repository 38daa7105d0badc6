package web

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
	"paytwice/store"
	"paytwice/views"
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

// Problem turns the field errors into the domain error that the error
// handler writes as a 400 problem+json; its detail names every field.
func (fe FieldErrors) Problem() error {
	noun := "parameter"
	if len(fe) > 1 {
		noun = "parameters"
	}
	return store.Errorf(store.EINVALID, "Invalid %s: %s.", noun, fe.Error())
}

func (fe FieldErrors) byField() map[string]string {
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
			r.fail(name, "%q is not a number of seconds (try 0.5)", truncate(v, 20))
			return def
		}
		f = d.Seconds()
	}
	switch {
	case math.IsNaN(f) || math.IsInf(f, 0):
		r.fail(name, "%q is not a number of seconds (try 0.5)", truncate(v, 20))
	case f < 0:
		r.fail(name, "must not be negative")
	case f < lo.Seconds():
		r.fail(name, "must be at least %s s", views.Seconds(lo.Seconds()))
	case f > hi.Seconds():
		r.fail(name, "must be at most %s s", groupDigits(int64(hi.Seconds())))
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
		r.fail(name, "must be at most %s", groupDigits(int64(hi)))
	case err != nil && strings.HasPrefix(v, "-"):
		r.fail(name, "must not be negative")
	case err != nil:
		if _, ferr := strconv.ParseFloat(v, 64); ferr == nil {
			r.fail(name, "must be a whole number, not %s", truncate(v, 20))
		} else {
			r.fail(name, "%q is not a number", truncate(v, 20))
		}
	case n < 0 && lo >= 0:
		r.fail(name, "must not be negative")
	case n < int64(lo):
		r.fail(name, "must be at least %s", groupDigits(int64(lo)))
	case n > int64(hi):
		r.fail(name, "must be at most %s", groupDigits(int64(hi)))
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
		r.fail(name, "unknown strategy %q; choose none, exponential, full, equal or decorrelated", truncate(v, 20))
		return def
	}
	return st
}

// formValue is what a form field shows: what the user sent, or the default.
func formValue(q url.Values, name, def string) string {
	if vs, ok := q[name]; ok && len(vs) > 0 {
		return vs[0]
	}
	return def
}

// groupDigits prints 100000 as "100,000".
func groupDigits(n int64) string { return views.Thousands(int(n)) }

// strategyOptions lists the strategies for a select element.
func strategyOptions() []views.SelectOption {
	var out []views.SelectOption
	for _, s := range sim.Strategies() {
		out = append(out, views.SelectOption{Value: string(s), Label: views.StrategyLabel(string(s))})
	}
	return out
}

// secondsText prints a duration as the article does: "0.5", "8".
func secondsText(d time.Duration) string { return views.Seconds(d.Seconds()) }

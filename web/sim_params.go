package web

import (
	"net/url"
	"time"

	"paytwice/pay"
	"paytwice/sim"
	"paytwice/sim/report"
	"paytwice/views"
)

// What the backoff and herd pages need beyond sim/report: field errors as
// a problem, and the form's values and options.

// fieldProblem turns field errors into the domain error that the error
// handler writes as a 400 problem+json; its detail names every field.
func fieldProblem(fe report.FieldErrors) error {
	noun := "parameter"
	if len(fe) > 1 {
		noun = "parameters"
	}
	return pay.Errorf(pay.EINVALID, "Invalid %s: %s.", noun, fe.Error())
}

// formValue is what a form field shows: what the user sent, or the default.
func formValue(q url.Values, name, def string) string {
	if vs, ok := q[name]; ok && len(vs) > 0 {
		return vs[0]
	}
	return def
}

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

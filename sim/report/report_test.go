package report

import (
	"context"
	"errors"
	"net/url"
	"strconv"
	"testing"
	"time"

	"paytwice/sim"
)

func TestBackoffForTheArticlesExample(t *testing.T) {
	rep, err := BackoffFor(url.Values{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Totals.WorstSeconds != 15.5 || rep.Totals.MeanSeconds != 7.75 {
		t.Errorf("totals %+v, want worst 15.5 s and mean 7.75 s", rep.Totals)
	}
	if len(rep.Schedule) != 5 || rep.Schedule[0].CeilingSeconds != 0.5 || !rep.Schedule[4].HitsCap {
		t.Errorf("schedule %+v", rep.Schedule)
	}
	if len(rep.Compare) != 5 || rep.Spread.FirstRoundPerMs != 2 || rep.Spread.Bins == nil {
		t.Errorf("spread %+v, %d strategies compared", rep.Spread, len(rep.Compare))
	}
}

func TestParametersAreNamedInFormOrder(t *testing.T) {
	_, err := BackoffFor(url.Values{"clients": {"0"}, "cap": {"0.1"}, "seed": {"-1"}, "strategy": {"Full"}})
	var fe FieldErrors
	if !errors.As(err, &fe) {
		t.Fatalf("error %v, want FieldErrors", err)
	}
	want := []FieldError{
		{"cap", "must be at least the base (0.5 s)"},
		{"clients", "must be at least 1"},
		{"seed", "must not be negative"},
	}
	if len(fe) != len(want) {
		t.Fatalf("errors %v, want %v", fe, want)
	}
	for i := range want {
		if fe[i] != want[i] {
			t.Errorf("error %d is %v, want %v", i, fe[i], want[i])
		}
	}
	if m := fe.ByField(); m["cap"] != want[0].Msg || len(m) != 3 {
		t.Errorf("by field %v", m)
	}
	for q, msg := range map[string]string{
		"base=0.0005":    "must be at least 0.001 s",
		"cap=1000000":    "must be at most 86,400 s",
		"retries=two":    `"two" is not a number`,
		"retries=2.5":    "must be a whole number, not 2.5",
		"base=":          "enter a number of seconds, such as 0.5",
		"base=1&base=2":  "give it once, not 2 times",
		"strategy=fulll": `unknown strategy "fulll"; choose none, exponential, full, equal or decorrelated`,
	} {
		v, _ := url.ParseQuery(q)
		_, errs := ParseBackoffQuery(v)
		if len(errs) != 1 || errs[0].Msg != msg {
			t.Errorf("%s: errors %v, want %q", q, errs, msg)
		}
	}
	if in, errs := ParseBackoffQuery(url.Values{"base": {"500ms"}}); len(errs) > 0 || in.Policy.Base != 500*time.Millisecond {
		t.Errorf("a duration is read as one: %v, %v", in.Policy.Base, errs)
	}
}

func TestHerdFor(t *testing.T) {
	rep, err := HerdFor(context.Background(), url.Values{"min": {"10"}, "max": {"20"}, "step": {"10"}, "trials": {"2"}}, SimHerdLimits)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Points) != 2*len(rep.Strategies) || rep.Params.BaseSeconds != 0.005 || rep.Params.CapSeconds != 2 {
		t.Errorf("report %+v", rep)
	}
	lim := HerdLimits{MaxClients: 1000, MaxTrials: 100, MaxCost: 1000}
	if _, errs := ParseHerdQuery(url.Values{"max": {"100"}}, lim); len(errs) != 1 || errs[0].Field != "trials" {
		t.Errorf("a run over the cost limit: %v", errs)
	}
	if _, errs := ParseHerdQuery(url.Values{"min": {"50"}, "max": {"10"}}, SimHerdLimits); len(errs) != 1 || errs[0].Msg != "must be at least min (50)" {
		t.Errorf("max below min: %v", errs)
	}
}

func TestHerdForLargeHerds(t *testing.T) {
	t.Run("a herd above the event model's size is computed and averaged", func(t *testing.T) {
		rep, err := HerdFor(context.Background(), url.Values{"min": {"4000"}, "max": {"4000"}, "trials": {"2"}, "seed": {"3"}}, SimHerdLimits)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range rep.Points {
			if p.Clients != 4000 || p.Truncated != 0 || p.MeanWork < 4000 || p.MeanCompletionSeconds <= 0 {
				t.Errorf("point %+v", p)
			}
		}
	})
	t.Run("counted herds cost about linearly in clients", func(t *testing.T) {
		small := HerdCost(HerdInput{Min: 10_000, Max: 10_000, Step: 1, Trials: 1})
		big := HerdCost(HerdInput{Min: 100_000, Max: 100_000, Step: 1, Trials: 1})
		if big > 11*small || big < 9*small {
			t.Errorf("cost %.0f at 10,000 clients, %.0f at 100,000", small, big)
		}
	})
	t.Run("the bound is the herd's", func(t *testing.T) {
		q := url.Values{"min": {"10"}, "max": {strconv.Itoa(sim.MaxHerdClients + 1)}}
		if _, errs := ParseHerdQuery(q, SimHerdLimits); len(errs) != 1 || errs[0].Field != "max" {
			t.Errorf("max over the bound: %v", errs)
		}
	})
}

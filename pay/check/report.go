package check

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"strings"
)

// Verdict is a case's outcome.
type Verdict string

// The verdicts.
const (
	Pass    Verdict = "PASS"
	Fail    Verdict = "FAIL"
	Differs Verdict = "DIFFERS" // works, but not as the IETF draft says
	Skip    Verdict = "SKIP"
	Info    Verdict = "INFO" // informational: never fails
)

// Result is one case's verdict.
type Result struct {
	Case    int     `json:"case"`
	Name    string  `json:"name"`
	Verdict Verdict `json:"verdict"`
	// Safety marks a failure that can cost money or leak: two effects
	// for one action, another caller's answer, a replay to another body.
	Safety bool `json:"safety,omitempty"`
	// Weak says the verdict comes from the answers alone: no oracle
	// counted the effects.
	Weak    bool    `json:"weak,omitempty"`
	Detail  string  `json:"detail"`
	Seconds float64 `json:"seconds"`
	// Sequence is, for a FAIL, the shortest run of requests (and counts
	// of effects) found that shows it, to replay by hand.
	Sequence []Step `json:"sequence,omitempty"`
}

// Step is one request of a failing sequence, or one count of effects.
type Step struct {
	// Kind is "request" or "count".
	Kind   string `json:"kind"`
	Caller string `json:"caller,omitempty"`
	Method string `json:"method,omitempty"`
	URL    string `json:"url"`
	// Key is the key header's value as sent ("" for none).
	Key  string `json:"key,omitempty"`
	Body string `json:"body,omitempty"`
	// BodySHA256 is the hash of the request's body.
	BodySHA256 string `json:"body_sha256,omitempty"`
	Status     int    `json:"status,omitempty"`
	NoAnswer   bool   `json:"no_answer,omitempty"`
	// AnswerSHA256 is the hash of the answer's body.
	AnswerSHA256 string `json:"answer_sha256,omitempty"`
	// Effects is what a count found.
	Effects *int `json:"effects,omitempty"`
}

// SchemaVersion names the shape of the JSON report; it changes only
// when a field changes meaning or goes away.
const SchemaVersion = "paytwice-check/2"

// Report is a run's outcome.
type Report struct {
	Schema  string `json:"schema"`
	URL     string `json:"url"`
	Seed    uint64 `json:"seed"`
	Storm   int    `json:"storm"`
	Rounds  int    `json:"rounds"`
	Profile string `json:"profile"`
	// Oracle is how effects were counted: "gateway", "count-url" or "none".
	Oracle string `json:"oracle"`
	// Strict says DIFFERS alone exits 3.
	Strict bool `json:"strict"`
	// Notes are what the run learnt about its configuration.
	Notes   []string `json:"notes"`
	Totals  Totals   `json:"summary"`
	Results []Result `json:"results"`
	// Linearizability is the check of the run's history.
	Linearizability Linearizability `json:"history"`
	Seconds         float64         `json:"seconds"`
	// History is every request the run sent.
	History []Record `json:"-"`
}

// Totals counts the verdicts, the history's check among them (PASS when
// linearizable, FAIL when not, SKIP when not decided).
type Totals struct {
	Pass    int `json:"pass"`
	Differs int `json:"differs"`
	Fail    int `json:"fail"`
	Skip    int `json:"skip"`
	Info    int `json:"info"`
	Exit    int `json:"exit"`
	// Line is the report's first line.
	Line string `json:"line"`
}

// Exit statuses.
const (
	ExitPassed   = 0
	ExitFailed   = 1
	ExitUsage    = 2
	ExitDiffered = 3
)

// ExitCode is 1 when a case failed or the history is not linearizable, 3
// when strict and a case only differs from the draft, else 0.
func (rep *Report) ExitCode(strict bool) int {
	differed := false
	for _, r := range rep.Results {
		switch r.Verdict {
		case Fail:
			return ExitFailed
		case Differs:
			differed = true
		}
	}
	if rep.Linearizability.Result == "violation" {
		return ExitFailed
	}
	if strict && differed {
		return ExitDiffered
	}
	return ExitPassed
}

// Counts counts the verdicts.
func (rep *Report) Counts() map[Verdict]int {
	n := map[Verdict]int{}
	for _, r := range rep.Results {
		n[r.Verdict]++
	}
	return n
}

// totals counts the verdicts and the history's check.
func (rep *Report) totals() Totals {
	var t Totals
	for _, r := range rep.Results {
		switch r.Verdict {
		case Pass:
			t.Pass++
		case Differs:
			t.Differs++
		case Fail:
			t.Fail++
		case Skip:
			t.Skip++
		case Info:
			t.Info++
		}
	}
	switch rep.Linearizability.Result {
	case "ok":
		t.Pass++
	case "violation":
		t.Fail++
	default:
		t.Skip++
	}
	t.Exit = rep.ExitCode(rep.Strict)
	t.Line = fmt.Sprintf("paytwice check: %d PASS, %d DIFFERS, %d FAIL, %d SKIP (oracle: %s) — exit %d",
		t.Pass, t.Differs, t.Fail, t.Skip, orDefault(rep.Oracle, OracleNone), t.Exit)
	return t
}

// Headline is the report's first line, for a CI log:
// "paytwice check: 14 PASS, 2 DIFFERS, 0 FAIL, 1 SKIP (oracle: gateway) — exit 0".
func (rep *Report) Headline() string { return rep.totals().Line }

// WriteText prints the report as a table a person reads, after its
// headline.
func (rep *Report) WriteText(w io.Writer) {
	fmt.Fprintln(w, rep.Headline())
	fmt.Fprintf(w, "\n%s  (seed %d, storm %d × %d rounds, profile %s)\n", rep.URL, rep.Seed, rep.Storm, rep.Rounds, rep.Profile)
	oracle := rep.Oracle
	switch oracle {
	case "", OracleNone:
		oracle = "none: verdicts on effects come from the answers alone (weak); give -count-url or -gateway"
	case OracleGateway:
		oracle = "the gateway's books (-gateway)"
	case OracleCountURL:
		oracle = "-count-url"
	}
	fmt.Fprintf(w, "effects counted by: %s\n", oracle)
	for _, n := range rep.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	fmt.Fprintln(w)
	for _, r := range rep.Results {
		fmt.Fprintln(w, resultLine(r))
		if len(r.Sequence) > 0 {
			fmt.Fprintln(w, "      shortest sequence that shows it:")
			for _, s := range r.Sequence {
				fmt.Fprintf(w, "        %s\n", s)
			}
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, rep.HistoryLine())
	fmt.Fprintln(w, rep.Summary())
}

func (s Step) String() string {
	if s.Kind == KindCount {
		return fmt.Sprintf("GET %s → %d effect(s)", s.URL, *s.Effects)
	}
	key := "no key"
	if s.Key != "" {
		key = fmt.Sprintf("key %q", s.Key)
	}
	who := ""
	if s.Caller == "other" {
		who = " (as -other-auth)"
	}
	out := "no answer"
	if !s.NoAnswer {
		out = fmt.Sprintf("%d, answer sha256:%s", s.Status, short(s.AnswerSHA256, 12))
	}
	return fmt.Sprintf("%s %s%s %s body sha256:%s %s → %s", s.Method, s.URL, who, key, short(s.BodySHA256, 12), short(s.Body, 100), out)
}

func resultLine(r Result) string {
	v := string(r.Verdict)
	if r.Weak {
		v += " (weak)"
	}
	if r.Safety {
		v += " (safety)"
	}
	return fmt.Sprintf("%2d  %-27s %-15s %s", r.Case, r.Name, v, r.Detail)
}

// HistoryLine says whether the run's history is linearizable.
func (rep *Report) HistoryLine() string {
	l := rep.Linearizability
	switch l.Result {
	case "ok":
		return fmt.Sprintf("history: %d operations, linearizable against the model of idempotent payments (Porcupine)", l.Operations)
	case "violation":
		return fmt.Sprintf("history: %d operations, NOT linearizable: no order of them keeps one effect per action and one answer per key (%s)", l.Operations, strings.Join(l.Groups, ", "))
	}
	return fmt.Sprintf("history: %d operations, not decided in %g s (-verify-timeout): neither shown linearizable nor shown not", l.Operations, l.Timeout)
}

// Summary is the last line: the counts and the time taken.
func (rep *Report) Summary() string {
	n := rep.Counts()
	return fmt.Sprintf("%d passed, %d failed, %d differ from the draft, %d skipped, %d informational, in %.1f s",
		n[Pass], n[Fail], n[Differs], n[Skip], n[Info], rep.Seconds)
}

// WriteJSON writes the report as one JSON document (schema in
// docs/check.md).
func (rep *Report) WriteJSON(w io.Writer) error {
	rep.Totals = rep.totals()
	if rep.Notes == nil {
		rep.Notes = []string{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// WriteJUnit writes the report as JUnit XML, one test case per case, for
// CI systems that show test results.
func (rep *Report) WriteJUnit(w io.Writer) error {
	type failure struct {
		Message string `xml:"message,attr"`
		Text    string `xml:",chardata"`
	}
	type skipped struct {
		Message string `xml:"message,attr"`
	}
	type testcase struct {
		Name      string   `xml:"name,attr"`
		Classname string   `xml:"classname,attr"`
		Time      string   `xml:"time,attr"`
		Failure   *failure `xml:"failure,omitempty"`
		Skipped   *skipped `xml:"skipped,omitempty"`
		SystemOut string   `xml:"system-out,omitempty"`
	}
	type suite struct {
		XMLName  xml.Name   `xml:"testsuite"`
		Name     string     `xml:"name,attr"`
		Tests    int        `xml:"tests,attr"`
		Failures int        `xml:"failures,attr"`
		Skipped  int        `xml:"skipped,attr"`
		Time     string     `xml:"time,attr"`
		Cases    []testcase `xml:"testcase"`
	}
	s := suite{Name: "paytwice check " + rep.URL, Time: fmt.Sprintf("%.3f", rep.Seconds)}
	for _, r := range rep.Results {
		tc := testcase{Name: fmt.Sprintf("%02d %s", r.Case, r.Name), Classname: "idempotency", Time: fmt.Sprintf("%.3f", r.Seconds), SystemOut: resultLine(r)}
		switch r.Verdict {
		case Fail:
			tc.Failure = &failure{Message: r.Detail, Text: resultLine(r)}
			s.Failures++
		case Skip:
			tc.Skipped = &skipped{Message: r.Detail}
			s.Skipped++
		}
		s.Cases = append(s.Cases, tc)
	}
	hist := testcase{Name: "history linearizable", Classname: "idempotency", Time: fmt.Sprintf("%.3f", rep.Linearizability.Seconds), SystemOut: rep.HistoryLine()}
	if rep.Linearizability.Result == "violation" {
		hist.Failure = &failure{Message: rep.HistoryLine()}
		s.Failures++
	}
	s.Cases = append(s.Cases, hist)
	s.Tests = len(s.Cases)
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(s); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}

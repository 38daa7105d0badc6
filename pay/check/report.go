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
}

// Report is a run's outcome.
type Report struct {
	URL     string   `json:"url"`
	Seed    uint64   `json:"seed"`
	Storm   int      `json:"storm"`
	Oracle  string   `json:"oracle"`
	Results []Result `json:"results"`
	// Linearizability is the check of the run's history.
	Linearizability Linearizability `json:"history"`
	Seconds         float64         `json:"seconds"`
	// History is every request the run sent.
	History []Record `json:"-"`
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

// WriteText prints the report as a table a person reads.
func (rep *Report) WriteText(w io.Writer) {
	fmt.Fprintf(w, "paytwice check %s  (seed %d, storm %d)\n", rep.URL, rep.Seed, rep.Storm)
	oracle := rep.Oracle
	if oracle == "" {
		oracle = "none: verdicts on effects come from the answers alone (weak); give -count-url or -gateway"
	}
	fmt.Fprintf(w, "effects counted by: %s\n\n", oracle)
	for _, r := range rep.Results {
		fmt.Fprintln(w, resultLine(r))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, rep.HistoryLine())
	fmt.Fprintln(w, rep.Summary())
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
	return fmt.Sprintf("history: %d operations, the check ran out of time", l.Operations)
}

// Summary is the last line: the counts and the time taken.
func (rep *Report) Summary() string {
	n := rep.Counts()
	return fmt.Sprintf("%d passed, %d failed, %d differ from the draft, %d skipped, %d informational, in %.1f s",
		n[Pass], n[Fail], n[Differs], n[Skip], n[Info], rep.Seconds)
}

// WriteJSON writes the report as JSON.
func (rep *Report) WriteJSON(w io.Writer) error {
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
	hist := testcase{Name: "history linearizable", Classname: "idempotency", SystemOut: rep.HistoryLine()}
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

package proxy

import (
	"encoding/xml"
	"fmt"
	"time"
)

// Progress counts the actions recorded, and those still open: not ended
// by a final answer, and not quiet for longer than settle (a client that
// went quiet that long has given up).
func (p *Proxy) Progress(settle time.Duration) (actions, open int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.cfg.Now()
	for _, c := range p.order {
		for _, a := range c.actions {
			actions++
			last := a.last()
			if a.final || (last.Done && now.Sub(last.Ended) > settle) {
				continue
			}
			open++
		}
	}
	return actions, open
}

// junit* are the elements of a JUnit XML report, the shape CI servers
// read: one suite per client, one case per rule.
type junitSuites struct {
	XMLName xml.Name     `xml:"testsuites"`
	Suites  []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Skipped  int         `xml:"skipped,attr"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Failure   *junitMessage `xml:"failure,omitempty"`
	Skipped   *junitMessage `xml:"skipped,omitempty"`
}

type junitMessage struct {
	Message string `xml:"message,attr"`
	Text    string `xml:",chardata"`
}

// JUnit renders the grades as JUnit XML: a broken rule is a failure, a
// rule not exercised or unknown is skipped, with the reason.
func (r Report) JUnit() ([]byte, error) {
	var out junitSuites
	for _, c := range r.Clients {
		s := junitSuite{Name: "paytwice proxy: " + c.Client}
		for _, g := range c.Grades {
			tc := junitCase{Name: fmt.Sprintf("rule %d %s", g.Rule, g.Name), Classname: "paytwice.proxy"}
			switch g.Verdict {
			case Broken:
				tc.Failure = &junitMessage{Message: g.Detail, Text: fmt.Sprintf("%s: broken %d of %d times; first: %s", g.Rule.Info().Asks, g.Broken, g.Exercised, g.Detail)}
				s.Failures++
			case NotExercised, Unknown:
				tc.Skipped = &junitMessage{Message: string(g.Verdict) + ": " + g.Detail}
				s.Skipped++
			}
			s.Cases = append(s.Cases, tc)
			s.Tests++
		}
		out.Suites = append(out.Suites, s)
	}
	b, err := xml.MarshalIndent(out, "", "  ")
	if err != nil {
		return nil, err
	}
	return append([]byte(xml.Header), append(b, '\n')...), nil
}

package check

import (
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/anishathalye/porcupine"
)

// Bounds of the search for a failing case's shortest sequence.
const (
	maxSequenceRecords = 80              // larger groups are shown, not shortened
	sequenceBudget     = 5 * time.Second // for all the FAILs of a run
	sequenceCheck      = 500 * time.Millisecond
	maxPlainSequence   = 6 // steps shown of a FAIL the history does not show
)

// sequences gives each FAIL the shortest sequence of its requests found
// that shows it. When the history of one of the case's groups is not
// linearizable, requests are left out one at a time for as long as what
// is left still is not: what remains is a minimal history with the
// violation. A FAIL the model does not see (an endpoint that refused
// everything, say) shows its case's first requests.
func (rep *Report) sequences() {
	deadline := time.Now().Add(sequenceBudget)
	byCase := map[int]map[string][]Record{}
	var groupOrder = map[int][]string{}
	for _, rec := range rep.History {
		if rec.Case == 0 {
			continue
		}
		if byCase[rec.Case] == nil {
			byCase[rec.Case] = map[string][]Record{}
		}
		if _, ok := byCase[rec.Case][rec.Group]; !ok {
			groupOrder[rec.Case] = append(groupOrder[rec.Case], rec.Group)
		}
		byCase[rec.Case][rec.Group] = append(byCase[rec.Case][rec.Group], rec)
	}
	// Counts carry no case number: they belong to their group's case.
	caseOfGroup := map[string]int{}
	for n, groups := range byCase {
		for g := range groups {
			caseOfGroup[g] = n
		}
	}
	for _, rec := range rep.History {
		if n, ok := caseOfGroup[rec.Group]; ok && rec.Case == 0 {
			byCase[n][rec.Group] = append(byCase[n][rec.Group], rec)
		}
	}
	for i := range rep.Results {
		res := &rep.Results[i]
		if res.Verdict != Fail {
			continue
		}
		var shortest []Record
		for _, g := range groupOrder[res.Case] {
			recs := byCase[res.Case][g]
			if len(recs) > maxSequenceRecords || time.Now().After(deadline) || !illegal(recs) {
				continue
			}
			// Answers that contradict each other need no count: the
			// fewest of them that do. A count that contradicts the
			// answers needs every request that may have had an effect.
			if answers := requestsOnly(recs, false); illegal(answers) {
				shortest = shorten(answers, deadline)
			} else {
				shortest = requestsOnly(recs, true)
			}
			break
		}
		if shortest == nil {
			for _, g := range groupOrder[res.Case] {
				shortest = append(shortest, byCase[res.Case][g]...)
				if len(shortest) >= maxPlainSequence {
					break
				}
			}
			shortest = shortest[:min(len(shortest), maxPlainSequence)]
		}
		for _, rec := range shortest {
			res.Sequence = append(res.Sequence, stepOf(rec))
		}
	}
}

// requestsOnly keeps the requests that may have had an effect (the
// successes and those with no answer or a 5xx), and the counts too if
// withCounts.
func requestsOnly(records []Record, withCounts bool) []Record {
	var out []Record
	for _, rec := range records {
		switch {
		case rec.Kind == KindCount:
			if withCounts {
				out = append(out, rec)
			}
		case rec.NoAnswer || rec.Status >= 500 || (rec.Status >= 200 && rec.Status < 300):
			out = append(out, rec)
		}
	}
	return out
}

// illegal says records have no linearizable order.
func illegal(records []Record) bool {
	return porcupine.CheckOperationsTimeout(model(), operations(records), sequenceCheck) == porcupine.Illegal
}

// shorten leaves out each record whose absence keeps records illegal.
func shorten(records []Record, deadline time.Time) []Record {
	cur := append([]Record(nil), records...)
	for i := 0; i < len(cur) && time.Now().Before(deadline); {
		try := append(append([]Record(nil), cur[:i]...), cur[i+1:]...)
		if len(try) > 0 && illegal(try) {
			cur = try
			continue
		}
		i++
	}
	return cur
}

func stepOf(rec Record) Step {
	if rec.Kind == KindCount {
		n := rec.Count
		return Step{Kind: KindCount, URL: rec.URL, Effects: &n}
	}
	sum := sha256.Sum256([]byte(rec.Body))
	return Step{Kind: KindRequest, Caller: rec.Caller, Method: rec.Method, URL: rec.URL, Key: rec.Key,
		Body: rec.Body, BodySHA256: hex.EncodeToString(sum[:]), Status: rec.Status, NoAnswer: rec.NoAnswer,
		AnswerSHA256: rec.BodySHA256}
}

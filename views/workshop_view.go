package views

import "strconv"

// WorkshopPage is a student's workshop page: register the endpoint, see
// the gateway to charge through, ask for a run and read its result.
type WorkshopPage struct {
	On bool
	// Host is the address the page was opened at.
	Host string
	// Mine is the student's registration, nil before the first.
	Mine *WorkshopMine
	// Name and URL are the form's values; Message a refusal to show.
	Name, URL, Message string
	// Presenter says the presenter opened the page: it shows their
	// switches (Board's), with which they open the workshop.
	Presenter bool
	Board     WorkshopBoard
}

// WorkshopMine is a student's own row and the gateway their endpoint
// charges through.
type WorkshopMine struct {
	Row     WorkshopRow
	Gateway string
}

// WorkshopRow is one student on the scoreboard, as the books say now.
type WorkshopRow struct {
	Name, Endpoint string
	// State is registered, queued, running, done or "not run".
	State string
	// Place in the queue, 1 next; 0 when not queued.
	Place                  int
	Cases, Passed, Failed  int
	FirstSafety, FirstFail string
	// Message says why the checker could not test the endpoint.
	Message string
	// Charges is how many charges the student's gateway took, Pruned of
	// them deleted from its books (oldest first) to keep them bounded.
	Charges int
	Pruned  int64
	// ChargesUnknown says the books did not answer: Charges and Pruned
	// are no count then.
	ChargesUnknown bool
}

// WorkshopFaults are the faults every student's gateway gives.
type WorkshopFaults struct {
	LatencyMS, HoldAnswerMS int
	DropFirstAnswer         bool
}

// WorkshopBoard is the board's scoreboard.
type WorkshopBoard struct {
	On, Presenter bool
	// Address is where students open the workshop page.
	Address string
	Faults  WorkshopFaults
	// Allowed are the networks the room calls, "" for none.
	Allowed       string
	Queued, Queue int
	Rows          []WorkshopRow
	// Hidden names the rows the presenter took off the scoreboard; only
	// the presenter's board has them, folded away, each with "show again".
	Hidden []string
}

// Verdict is the row's one word and its tone: what the board shows
// first, in words as well as colour.
func (r WorkshopRow) Verdict() (word string, tone Tone) {
	switch {
	case r.FirstSafety != "":
		return "unsafe", ToneBad
	case r.State == "queued":
		return "queued " + strconv.Itoa(r.Place), ToneMute
	case r.State == "running":
		return "running", ToneInfo
	case r.State == "not run":
		return "not run", ToneWarn
	case r.State == "registered":
		return "not yet run", ToneMute
	case r.State == "interrupted":
		// The server stopped: what the run did not reach is no verdict.
		return "interrupted", ToneWarn
	case r.Failed > 0:
		return "failed", ToneWarn
	}
	return "passed", ToneOK
}

// cases is "12 of 19 passed", or what is known of a run in progress.
func (r WorkshopRow) cases() string {
	if r.Cases == 0 {
		return "–"
	}
	return strconv.Itoa(r.Passed) + " of " + strconv.Itoa(r.Cases) + " passed"
}

// charges is the gateway's count as the books say it, the pruned named
// apart: "10012 (12 pruned from the books)".
func (r WorkshopRow) charges() string {
	if r.ChargesUnknown {
		return "not known right now (the books did not answer)"
	}
	if r.Pruned == 0 {
		return strconv.Itoa(r.Charges)
	}
	return strconv.Itoa(r.Charges) + " (" + strconv.FormatInt(r.Pruned, 10) + " pruned from the books)"
}

// faultsText says which faults every gateway gives, in words.
func (f WorkshopFaults) text() string {
	var parts []string
	if f.LatencyMS > 0 {
		parts = append(parts, "every charge takes "+strconv.Itoa(f.LatencyMS)+" ms")
	}
	if f.HoldAnswerMS > 0 {
		parts = append(parts, "every answer is held "+strconv.Itoa(f.HoldAnswerMS)+" ms after the charge")
	}
	if f.DropFirstAnswer {
		parts = append(parts, "each key's first answer is dropped after the charge")
	}
	if len(parts) == 0 {
		return "none: the gateway answers at once"
	}
	out := parts[0]
	for _, p := range parts[1:] {
		out += "; " + p
	}
	return out
}

// workshopRunExample is how a student starts the Go reference server
// against their own gateway.
func workshopRunExample(gateway string) string {
	return "export GATEWAY=" + gateway + "\n" +
		"ADDR=:8000 go run server.go\n" +
		"ADDR=:8000 python3 server.py"
}

// chargesData and prunedData are the counts for a page's scripts and
// tests, "unknown" where the books did not answer.
func (r WorkshopRow) chargesData() string {
	if r.ChargesUnknown {
		return "unknown"
	}
	return strconv.Itoa(r.Charges)
}

func (r WorkshopRow) prunedData() string {
	if r.ChargesUnknown {
		return "unknown"
	}
	return strconv.FormatInt(r.Pruned, 10)
}

package views

// BYOCView is the room's "bring your own client" scoreboard: how to point
// a client at the room, and each student's grade on the ten rules.
type BYOCView struct {
	// Host is the address the page was opened at: students use the same.
	Host      string
	Presenter bool
	// Next is the failure the presenter chose for every next action; ""
	// means the schedule's.
	Next     string
	Faults   []BYOCFault
	Rules    []BYOCRule
	Students []BYOCStudent
}

// BYOCFault is one failure the presenter may choose.
type BYOCFault struct{ Name, Says string }

// BYOCRule is one rule's column.
type BYOCRule struct {
	Num  int
	Asks string
}

// BYOCStudent is one student's row: a verdict per rule, in rule order.
type BYOCStudent struct {
	Name                    string
	Actions, Passed, Broken int
	Verdicts                []string
	FirstBroken             string
}

// verdictWord is the short word a scoreboard cell shows; the colour only
// repeats it.
func verdictWord(v string) string {
	switch v {
	case "passed":
		return "kept"
	case "broken":
		return "broke"
	case "unknown":
		return "?"
	}
	return "–"
}

// byocExample is a first request a student can paste.
func byocExample(host string) string {
	return "curl -i -X POST http://" + host + "/byo/alice/v1/payments \\\n" +
		"  -H 'Idempotency-Key: 8e03978e-40d5-43e8-bc93-6894a57f9324' -H 'Content-Type: application/json' \\\n" +
		`  -d '{"order_id":"A-1","amount_satang":129900}'`
}

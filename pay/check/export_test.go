package check

// CaseCount is how many cases a run has, numbered 1 to CaseCount: the
// tests that run some cases apart from the others list the rest.
func CaseCount() int { return len(cases) }

package web

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"paytwice/pay"
	"paytwice/views"
)

func problemView(p ProblemType) views.Problem {
	return views.Problem{Slug: string(p.Code), Status: p.Status, Title: p.Title, Explain: p.Explain, Fix: p.Fix, Saved: p.Saved}
}

// handleProblemPage is GET /problems/:code: the page a problem's type URI
// points at.
func handleProblemPage(c echo.Context) error {
	p, ok := problemsByCode[pay.Code(c.Param("code"))]
	if !ok {
		return pay.Errorf(pay.ENOTFOUND, "There is no problem type %q.", pay.Truncate(c.Param("code"), 40))
	}
	return render(c, http.StatusOK, views.ProblemPage(problemView(p)))
}

// handleProblemIndex is GET /problems.
func handleProblemIndex(c echo.Context) error {
	ps := make([]views.Problem, len(Problems))
	for i, p := range Problems {
		ps[i] = problemView(p)
	}
	return render(c, http.StatusOK, views.ProblemIndex(ps))
}

package web

import (
	_ "embed"
	"net/http"

	"github.com/labstack/echo/v4"
)

// openAPIDocument is the OpenAPI 3.1 description of every /v1/ path:
// statuses, bodies in both encodings, problem and Stripe error shapes,
// and the retry headers. The tests validate it, and every /v1/ answer
// the API tests receive against it, so it cannot drift from the server.
//
//go:embed openapi.json
var openAPIDocument []byte

// handleOpenAPI is GET /openapi.json, for generating a typed client,
// contract tests, or importing the API into a tool.
func handleOpenAPI(c echo.Context) error {
	c.Response().Header().Set("Cache-Control", "no-cache")
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, openAPIDocument)
}

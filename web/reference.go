package web

import (
	"time"

	"github.com/labstack/echo/v4"
)

// referenceHandlers serve what a client's author reads: the key policy,
// the OpenAPI document, the page on real clients and the problem types.
// Only the policy depends on the server: it states the retention and the
// lock timeout the server runs with.
type referenceHandlers struct {
	retention, lockTimeout time.Duration
}

// routes registers the reference pages and documents.
func (h referenceHandlers) routes(e *echo.Echo) {
	e.GET("/v1/idempotency-policy", h.handlePolicy)
	e.GET("/openapi.json", handleOpenAPI)
	e.GET("/clients", handleClients)
	e.GET("/problems", handleProblemIndex)
	e.GET("/problems/:code", handleProblemPage)
}

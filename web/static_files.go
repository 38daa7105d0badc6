package web

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"paytwice/static"
)

var staticHandler = http.StripPrefix("/static/", http.FileServerFS(static.FS))

// handleStatic serves the embedded files. Their names carry versions
// where it matters (htmx-2.0.11.min.js), and the rest are small, so one
// hour of caching is safe while a class reloads the page often.
func (s *Server) handleStatic(c echo.Context) error {
	c.Response().Header().Set("Cache-Control", "public, max-age=3600")
	staticHandler.ServeHTTP(c.Response(), c.Request())
	return nil
}

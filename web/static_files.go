package web

import (
	"bytes"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"paytwice/pay"
	"paytwice/static"
)

// Cache policies of the static files. A hashed name (static.Path) names
// one content for good, so browsers keep it a year without asking again.
// A plain name (/static/pay.js) may change with the next deploy, so
// browsers ask every time and get 304 Not Modified while the ETag still
// matches.
const (
	cacheImmutable  = "public, max-age=31536000, immutable"
	cacheRevalidate = "no-cache"
)

// handleStatic serves the embedded files, under their hashed names and
// their plain ones.
func handleStatic(c echo.Context) error {
	name := c.Param("*")
	f, immutable, ok := static.Lookup(name)
	if !ok {
		return pay.Errorf(pay.ENOTFOUND, "There is no static file %q. The page that asked for it may come from an older version: reload it.", name)
	}
	h := c.Response().Header()
	if immutable {
		h.Set("Cache-Control", cacheImmutable)
	} else {
		h.Set("Cache-Control", cacheRevalidate)
	}
	h.Set("ETag", `"`+f.Hash+`"`)
	http.ServeContent(c.Response(), c.Request(), f.Name, time.Time{}, bytes.NewReader(f.Content))
	return nil
}

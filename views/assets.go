package views

import "paytwice/static"

// asset is the address of a static file under its content-hashed name,
// which browsers cache for good (see package static).
func asset(name string) string { return static.Path(name) }

//go:build norelay

package room

// A server built with -tags norelay shows only its own requests, as
// before the relay: bench/relay.sh compares it with the normal build.
func init() { relayOff = true }

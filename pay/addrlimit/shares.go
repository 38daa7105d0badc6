package addrlimit

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Defaults of the bounds kept here, besides DefaultConnections.
const (
	// DefaultInFlight is how many requests of one address may be in
	// flight at once (live views aside).
	DefaultInFlight = 512
	// DefaultReserve is how many connections, and requests in flight,
	// the presenter may have beyond an address's share.
	DefaultReserve = 64
	// DefaultStreams is how many live views (event streams) one address
	// may hold at once: a whole class behind one NAT, a phone and a tab
	// or two each.
	DefaultStreams = 200
	// StreamRetryAfter is the Retry-After, in seconds, of a live view
	// turned away, by a server or by the cluster's front door alike (the
	// page reconnects by itself).
	StreamRetryAfter = 10
	// DefaultIdleAfter is how long an address is remembered after its
	// last use: the tokens a server recognised as the presenter's among
	// them, at a front door.
	DefaultIdleAfter = 10 * time.Minute
)

// Shares are the bounds of this package as a server's -limits names them:
// what a front door before several servers needs of that flag.
type Shares struct {
	Connections int // connections-per-address
	InFlight    int // in-flight-per-address
	Reserve     int // presenter-reserve
	Streams     int // streams-per-address
	// IdleAfter (idle-after) is how long a front door keeps a token a
	// server recognised as the presenter's after it last heard of it.
	IdleAfter time.Duration
}

// The names of Shares' bounds in -limits.
const (
	ConnectionsName = "connections-per-address"
	InFlightName    = "in-flight-per-address"
	ReserveName     = "presenter-reserve"
	IdleAfterName   = "idle-after"
	StreamsName     = "streams-per-address"
)

// ParseShares reads Shares out of a -limits value (comma-separated
// name=value pairs) over the defaults. Only its own five names are read
// and checked; the others are the servers' to check.
func ParseShares(limits string) (Shares, error) {
	sh := Shares{Connections: DefaultConnections, InFlight: DefaultInFlight, Reserve: DefaultReserve, Streams: DefaultStreams, IdleAfter: DefaultIdleAfter}
	for _, part := range strings.Split(limits, ",") {
		name, value, _ := strings.Cut(part, "=")
		var v *int
		switch strings.TrimSpace(name) {
		case IdleAfterName:
			d, err := time.ParseDuration(strings.TrimSpace(value))
			if err != nil || d <= 0 {
				return sh, fmt.Errorf("limit %s must be a duration such as 10m, not %q", IdleAfterName, strings.TrimSpace(value))
			}
			sh.IdleAfter = d
			continue
		case ConnectionsName:
			v = &sh.Connections
		case InFlightName:
			v = &sh.InFlight
		case ReserveName:
			v = &sh.Reserve
		case StreamsName:
			v = &sh.Streams
		default:
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(value))
		if err != nil || n <= 0 {
			return sh, fmt.Errorf("limit %s must be a positive whole number, not %q", strings.TrimSpace(name), strings.TrimSpace(value))
		}
		*v = n
	}
	return sh, nil
}

package live

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"strings"
)

// Every event id a page sees carries the epoch of the hub that numbered
// it: one life of one server. Numbers start again at 1 when a server
// starts, so a number alone from a page that last heard an earlier life
// (or another server) would name some other event here; with its epoch,
// the stream knows the page's numbers are not its own and sends the page
// the whole room as it is now before anything else (web/board).

// newEpoch names a hub's life: random, so that two lives of one server, or
// two servers, never share one.
func newEpoch() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}

// Epoch names this hub's life: the first part of every event id it gives
// a page (EventID).
func (h *Hub) Epoch() string { return h.epoch }

// EventID is the id a page is given for event seq of the hub whose epoch
// is epoch: "<epoch>-<seq>".
func EventID(epoch string, seq uint64) string {
	return epoch + "-" + strconv.FormatUint(seq, 10)
}

// PlacedEventID is EventID with, after "@", the place in the room's order
// of the newest event the page has then (order.go), when there is one: a
// page resuming on another server of the room continues from it there.
func PlacedEventID(epoch string, seq uint64, place Place) string {
	if place.IsZero() {
		return EventID(epoch, seq)
	}
	return EventID(epoch, seq) + "@" + place.String()
}

// ParsePlacedEventID reads an id PlacedEventID wrote: ParseEventID's
// parts, and the place (zero when the id has none). ok is false for an
// id that ParseEventID refuses, or whose place is not one.
func ParsePlacedEventID(id string) (epoch string, seq uint64, place Place, ok bool) {
	id, at, placed := strings.Cut(id, "@")
	if placed {
		if place, ok = ParsePlace(at); !ok {
			return "", 0, Place{}, false
		}
	}
	epoch, seq, ok = ParseEventID(id)
	if !ok {
		return "", 0, Place{}, false
	}
	return epoch, seq, place, true
}

// ParseEventID reads an id a page sends back (Last-Event-ID, ?since=).
// A bare number, from a page loaded before ids carried an epoch, has the
// epoch "": it matches no hub's, so the page is sent the whole room. ok
// is false for anything else, which a stream treats as a page that has
// seen nothing.
func ParseEventID(id string) (epoch string, seq uint64, ok bool) {
	num := id
	if i := strings.LastIndexByte(id, '-'); i >= 0 {
		epoch, num = id[:i], id[i+1:]
		if !validEpoch(epoch) {
			return "", 0, false
		}
	}
	seq, err := strconv.ParseUint(num, 10, 64)
	if err != nil {
		return "", 0, false
	}
	return epoch, seq, true
}

// validEpoch accepts what newEpoch makes, and nothing long or odd.
func validEpoch(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

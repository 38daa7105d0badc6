package live

import (
	"testing"
	"time"
)

func TestEventIDs(t *testing.T) {
	t.Run("an id names the hub's life and the event, and reads back", func(t *testing.T) {
		h := New(8, time.Now)
		id := EventID(h.Epoch(), 42)
		epoch, seq, ok := ParseEventID(id)
		if !ok || epoch != h.Epoch() || seq != 42 {
			t.Fatalf("ParseEventID(%q) = %q, %d, %v", id, epoch, seq, ok)
		}
	})
	t.Run("two lives of a server never share an epoch", func(t *testing.T) {
		seen := map[string]bool{}
		for range 1000 {
			e := New(8, time.Now).Epoch()
			if seen[e] || !validEpoch(e) {
				t.Fatalf("epoch %q repeated or malformed", e)
			}
			seen[e] = true
		}
	})
	for _, c := range []struct {
		in    string
		epoch string
		seq   uint64
		ok    bool
	}{
		{"17", "", 17, true}, // a page from before epochs: no life matches ""
		{"0", "", 0, true},
		{"a1b2c3d4e5f6-0", "a1b2c3d4e5f6", 0, true},
		{"", "", 0, false},
		{"-5", "", 0, false},
		{"A1B2-5", "", 0, false},
		{"a1b2-", "", 0, false},
		{"a1b2--5", "", 0, false},
		{"zz-5", "", 0, false},
		{"a1b2-5x", "", 0, false},
		{"a1b2-18446744073709551616", "", 0, false},
		{"0123456789abcdef0123456789abcdef0-1", "", 0, false},
	} {
		t.Run("parsing "+c.in, func(t *testing.T) {
			epoch, seq, ok := ParseEventID(c.in)
			if epoch != c.epoch || seq != c.seq || ok != c.ok {
				t.Fatalf("ParseEventID(%q) = %q, %d, %v; want %q, %d, %v", c.in, epoch, seq, ok, c.epoch, c.seq, c.ok)
			}
		})
	}
}

// FuzzParseEventID: whatever a page sends as Last-Event-ID, parsing
// never panics, and what it accepts formats back to itself.
func FuzzParseEventID(f *testing.F) {
	for _, s := range []string{"", "0", "17", "a1b2c3d4e5f6-9", "-1", "x-1", "a-b-1", "ffffffffffff-18446744073709551615"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		epoch, seq, ok := ParseEventID(s)
		if !ok {
			return
		}
		if epoch == "" {
			return // a bare number: the form of no hub
		}
		if e2, s2, ok2 := ParseEventID(EventID(epoch, seq)); !ok2 || e2 != epoch || s2 != seq {
			t.Fatalf("%q parsed as %q %d, which does not format and read back", s, epoch, seq)
		}
	})
}

// FuzzParsePlacedEventID: an id with a place in the room's order (after
// "@") never panics the parser, and what it accepts formats back to the
// same parts.
func FuzzParsePlacedEventID(f *testing.F) {
	for _, s := range []string{"a1b2c3d4e5f6-9@3.1.2", "a1b2c3d4e5f6-9", "a1b2c3d4e5f6-9@", "a1b2c3d4e5f6-9@0.1.1", "9@1.1.1",
		"a1b2c3d4e5f6-9@1.1", "a1b2c3d4e5f6-9@1.1.1@2.2.2", "x-9@1.1.1", "a1b2c3d4e5f6-9@18446744073709551615.1.1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		epoch, seq, place, ok := ParsePlacedEventID(s)
		if !ok || epoch == "" {
			return
		}
		e2, s2, p2, ok2 := ParsePlacedEventID(PlacedEventID(epoch, seq, place))
		if !ok2 || e2 != epoch || s2 != seq || p2 != place {
			t.Fatalf("%q parsed as %q %d %v, which does not format and read back", s, epoch, seq, place)
		}
		if !place.IsZero() && (place.N == 0 || place.I == 0 || place.J == 0) {
			t.Fatalf("%q gave the place %v, with a zero part", s, place)
		}
	})
}

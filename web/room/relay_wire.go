package room

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"paytwice/web/live"
)

// The relay's notifications are written in a compact form of their own,
// because every server reads every other server's events: with JSON,
// each of a payment's six events repeated its key, order, scope and
// fingerprint, spelled its time as text and carried every field's name,
// and decoding them through reflection cost the other servers more than
// the payment itself.
//
// A notification is its head ("pt1 " and the sending relay's id, then a
// newline) followed by one record per event. A record is a run of fields,
// each a tag byte, the value's length in decimal, ':' and the value, and
// it ends with a newline. Within one notification:
//
//   - an event of a request repeats nothing that the previous event of
//     that request said: scope, key, order, amount, fingerprint and server
//     are written only where they differ (an empty value clears one);
//   - times are nanoseconds since the previous event's time (the first
//     since 1970);
//   - a kind, request or message already sent is sent again as its
//     number (the strings sent as they are, counted from 0).
//
// Values are the strings themselves: a record is decoded by slicing the
// payload, with no copy and no reflection. An event with a string that a
// notification cannot carry as it is (a NUL byte, invalid UTF-8) is sent
// as a JSON record instead, tag 'J', as every event once was.
const wireHead = "pt1 "

// The fields' tags.
const (
	tagKind        = 'k'
	tagTime        = 't'
	tagRequest     = 'r'
	tagScope       = 's'
	tagKey         = 'y'
	tagOrder       = 'o'
	tagAmount      = 'a'
	tagStatus      = 'c'
	tagFingerprint = 'f'
	tagCharge      = 'h'
	tagSweep       = 'w'
	tagFault       = 'x'
	tagMessage     = 'm'
	tagKindRef     = 'K' // a kind, request or message sent before, by number
	tagRequestRef  = 'R'
	tagMessageRef  = 'M'
	tagServer      = 'v'
	tagAttempt     = 'p' // the page's name for an attempt
	tagPriority    = 'P' // a step of the presenter's own requests
	tagJSON        = 'J' // the whole event as JSON
)

// wireWriter builds one notification.
type wireWriter struct {
	buf []byte
	// events is how many records buf holds.
	events int
	// last is the previous event of each request in this notification,
	// what the next one leaves unsaid.
	last map[string]*live.Event
	// strings numbers the kinds, requests and messages sent as they are
	// in this notification; sent counts them.
	strings map[string]int
	sent    int
	// time is the time of the previous event with one, in nanoseconds.
	time int64
}

func newWireWriter(head string) *wireWriter {
	w := &wireWriter{last: map[string]*live.Event{}, strings: map[string]int{}}
	w.reset(head)
	return w
}

// reset starts a new notification.
func (w *wireWriter) reset(head string) {
	w.buf = append(w.buf[:0], head...)
	w.events, w.time, w.sent = 0, 0, 0
	clear(w.last)
	clear(w.strings)
}

// record appends e's record to dst as w would write it next, without
// changing w (see add).
func (w *wireWriter) record(dst []byte, e *live.Event) []byte {
	if !carriable(e) {
		b, err := json.Marshal(e)
		if err != nil {
			return dst
		}
		dst = field(dst, tagJSON, string(b))
		return append(priority(dst, e), '\n')
	}
	var base live.Event
	if e.Request != "" {
		dst = w.interned(dst, tagRequest, tagRequestRef, e.Request)
		if prev := w.last[e.Request]; prev != nil {
			base = *prev
		}
	}
	dst = w.interned(dst, tagKind, tagKindRef, string(e.Kind))
	if !e.Time.IsZero() {
		var n [20]byte
		dst = field(dst, tagTime, string(strconv.AppendInt(n[:0], e.Time.UnixNano()-w.time, 10)))
	}
	dst = changed(dst, tagScope, e.Scope, base.Scope)
	dst = changed(dst, tagKey, e.Key, base.Key)
	dst = changed(dst, tagOrder, e.OrderID, base.OrderID)
	if e.Amount != base.Amount {
		dst = field(dst, tagAmount, strconv.FormatInt(e.Amount, 10))
	}
	if e.Status != 0 {
		dst = field(dst, tagStatus, strconv.Itoa(e.Status))
	}
	dst = changed(dst, tagFingerprint, e.Fingerprint, base.Fingerprint)
	dst = changed(dst, tagCharge, e.Charge, "")
	dst = changed(dst, tagSweep, string(e.Sweep), "")
	if e.Fault {
		dst = field(dst, tagFault, "1")
	}
	if e.Message != "" {
		dst = w.interned(dst, tagMessage, tagMessageRef, e.Message)
	}
	dst = changed(dst, tagServer, e.Server, base.Server)
	dst = changed(dst, tagAttempt, e.Attempt, "")
	return append(priority(dst, e), '\n')
}

// priority writes e's Priority, which its JSON leaves out (the hub's
// events go to students' pages as JSON too). The server that handled the
// request sets it, never the client, and only servers write to the
// relay's channel, so the other servers may trust it: without it, their
// boards would hold the presenter's payments back with the class's.
func priority(dst []byte, e *live.Event) []byte {
	if !e.Priority {
		return dst
	}
	return field(dst, tagPriority, "1")
}

// add appends rec, e's record from record, and remembers what the next
// records may leave unsaid.
func (w *wireWriter) add(rec []byte, e *live.Event) {
	w.buf = append(w.buf, rec...)
	w.events++
	if rec[0] == tagJSON {
		return // read apart from the others
	}
	if e.Request != "" {
		w.last[e.Request] = e
	}
	if !e.Time.IsZero() {
		w.time = e.Time.UnixNano()
	}
	// Number the strings record wrote as they are, in its order, as the
	// reader does; a string written twice in one record counts twice. The
	// kind is always written, even empty; a request or message only when
	// it is not.
	kinds := [3]string{e.Request, string(e.Kind), e.Message}
	var literal [3]bool
	for i, v := range kinds {
		_, known := w.strings[v]
		literal[i] = (v != "" || i == 1) && !known
	}
	for i, v := range kinds {
		if literal[i] {
			if _, known := w.strings[v]; !known {
				w.strings[v] = w.sent
			}
			w.sent++
		}
	}
}

// interned writes v as it is, the first time, and as its number after.
func (w *wireWriter) interned(dst []byte, tag, ref byte, v string) []byte {
	if n, ok := w.strings[v]; ok {
		var b [20]byte
		return field(dst, ref, string(strconv.AppendInt(b[:0], int64(n), 10)))
	}
	return field(dst, tag, v)
}

// carriable reports whether every string of e can be written as it is.
func carriable(e *live.Event) bool {
	if e.Lookup != "" {
		// A field the records have no tag for: the JSON form carries it,
		// and a server that does not know it reads the rest.
		return false
	}
	for _, s := range [...]string{string(e.Kind), e.Request, e.Scope, e.Key, e.OrderID, e.Fingerprint,
		e.Charge, string(e.Sweep), e.Message, e.Server, e.Attempt} {
		if strings.IndexByte(s, 0) >= 0 || !utf8.ValidString(s) {
			return false
		}
	}
	return true
}

func field(dst []byte, tag byte, v string) []byte {
	dst = append(dst, tag)
	dst = strconv.AppendInt(dst, int64(len(v)), 10)
	dst = append(dst, ':')
	return append(dst, v...)
}

// changed writes v unless it is what the previous event said.
func changed(dst []byte, tag byte, v, was string) []byte {
	if v == was {
		return dst
	}
	return field(dst, tag, v)
}

var errWire = errors.New("malformed record")

// wireReader reads one notification, as the wireWriter that wrote it
// kept track.
type wireReader struct {
	out     []live.Entry
	last    map[string]int // request → its previous event in out
	strings []string       // the kinds, requests and messages sent as they are
	time    int64
}

// decodeWire reads the events of body, a notification without its head,
// into entries of the hub they are published into. The events' strings
// share body's memory.
func decodeWire(body string) ([]live.Entry, error) {
	// A record ends with a newline; a value may hold some too, so this
	// is enough room, seldom more than needed.
	r := wireReader{last: map[string]int{}, out: make([]live.Entry, 0, strings.Count(body, "\n"))}
	for body != "" {
		// Each event is read where it ends up, in the entry the hub's ring
		// will point to: one of its own would move to the heap, and a copy
		// into another entry would be a second garbage event for every
		// event another server sends.
		r.out = append(r.out, live.Entry{})
		e := &r.out[len(r.out)-1].Event
		isJSON := false
		for {
			if body == "" {
				return nil, errWire
			}
			tag := body[0]
			if tag == '\n' {
				body = body[1:]
				break
			}
			colon := strings.IndexByte(body, ':')
			if colon < 2 {
				return nil, errWire
			}
			n, err := strconv.Atoi(body[1:colon])
			if err != nil || n < 0 || n > len(body)-colon-1 {
				return nil, errWire
			}
			v := body[colon+1 : colon+1+n]
			body = body[colon+1+n:]
			if err := r.set(e, tag, v); err != nil {
				return nil, err
			}
			isJSON = isJSON || tag == tagJSON
		}
		if e.Request != "" && !isJSON {
			r.last[e.Request] = len(r.out) - 1
		}
	}
	return r.out, nil
}

// set reads one field into e.
func (r *wireReader) set(e *live.Event, tag byte, v string) error {
	var err error
	switch tag {
	case tagJSON:
		err = json.Unmarshal([]byte(v), e)
		e.Seq = 0
	case tagRequest, tagRequestRef:
		// The request comes first: what its previous event said holds
		// until a field says otherwise.
		if v, err = r.string(tag == tagRequestRef, v); err != nil {
			return err
		}
		e.Request = v
		if i, ok := r.last[v]; ok {
			prev := &r.out[i].Event
			e.Scope, e.Key, e.OrderID, e.Amount = prev.Scope, prev.Key, prev.OrderID, prev.Amount
			e.Fingerprint, e.Server = prev.Fingerprint, prev.Server
		}
	case tagKind, tagKindRef:
		v, err = r.string(tag == tagKindRef, v)
		e.Kind = live.Kind(v)
	case tagTime:
		var d int64
		d, err = strconv.ParseInt(v, 10, 64)
		r.time += d
		e.Time = time.Unix(0, r.time).UTC()
	case tagScope:
		e.Scope = v
	case tagKey:
		e.Key = v
	case tagOrder:
		e.OrderID = v
	case tagAmount:
		e.Amount, err = strconv.ParseInt(v, 10, 64)
	case tagStatus:
		e.Status, err = strconv.Atoi(v)
	case tagFingerprint:
		e.Fingerprint = v
	case tagCharge:
		e.Charge = v
	case tagSweep:
		e.Sweep = live.SweepResult(v)
	case tagFault:
		e.Fault = v == "1"
	case tagMessage, tagMessageRef:
		e.Message, err = r.string(tag == tagMessageRef, v)
	case tagServer:
		e.Server = v
	case tagAttempt:
		e.Attempt = v
	case tagPriority:
		// After a JSON record's 'J' too, whose JSON cannot say it.
		e.Priority = v == "1"
	default:
		err = errWire
	}
	return err
}

// string is v, sent as it is, or the string numbered v if ref.
func (r *wireReader) string(ref bool, v string) (string, error) {
	if !ref {
		r.strings = append(r.strings, v)
		return v, nil
	}
	i, err := strconv.Atoi(v)
	if err != nil || i < 0 || i >= len(r.strings) {
		return "", errWire
	}
	return r.strings[i], nil
}

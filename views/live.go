package views

import (
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	"paytwice/pay"
)

// This file holds the plain data the live panels draw. The web package
// builds it from the event stream; the components here only draw it, so a
// test can render any state without a server.

// Lane is one column of the timeline's sequence diagram.
type Lane int

// The four lanes, left to right.
const (
	LaneBrowser Lane = iota + 1
	LaneServer
	LaneDatabase
	LaneGateway
)

// Lanes lists the lanes in order, with the names the diagram shows.
var Lanes = []struct {
	Lane Lane
	Name string
}{{LaneBrowser, "Browser"}, {LaneServer, "Server"}, {LaneDatabase, "Database"}, {LaneGateway, "Gateway"}}

// Tone picks a badge's colour. Every badge also carries a word, so the
// colour is never the only signal.
type Tone string

// The tones, matching the .badge classes of the style sheet.
const (
	ToneOK   Tone = "ok"
	ToneWarn Tone = "warn"
	ToneBad  Tone = "bad"
	ToneInfo Tone = "info"
	ToneMute Tone = "mute"
)

// Badge is a short coloured label with its text.
type Badge struct {
	Text string
	Tone Tone
}

// Step is one arrow of a request's row: a message from one lane to
// another, or a note on one lane when From == To.
type Step struct {
	ID    string // set when a later event may replace this step
	From  Lane
	To    Lane
	Label string
	Badge Badge
	Lost  bool // the message never arrived: the arrow ends in a cross
	// Sent marks an answer sent to a page that has not yet said it
	// arrived: the arrow is drawn dashed until it does.
	Sent  bool
	Title string // the event's full message, for a tooltip
}

// TimelineRow is one request (or one action of the server itself, such as
// a sweep) drawn as a row of arrows.
type TimelineRow struct {
	ID    string // DOM id of the row
	Time  time.Time
	Title string // "POST /v1/payments", "Sweeper", …
	// Server names the server that handled the request, when several
	// share one database; "" on a server of its own.
	Server string
	Key    string // the idempotency key, in full
	// PersonalData is what the key looks like ("an e-mail address") when
	// it looks like personal data, else "".
	PersonalData string
	OrderID      string
	Amount       int64 // satang; 0 when unknown
	Scope        string
	Outcome      Badge
	Steps        []Step
	// Attempt is the checkout page's name for the request, when a page
	// sent it: the page then says whether the answer reached it, and
	// NotReceived is why it did not ("" until then, or when it did).
	Attempt     string
	Received    bool
	NotReceived string
}

// KeyRow is one row of the idempotency key table.
type KeyRow struct {
	ID    string // DOM id
	Scope string
	Key   string
	// PersonalData is what the key looks like when it looks like personal
	// data, else "" (see TimelineRow).
	PersonalData string
	Fingerprint  string // a prefix is shown
	OrderID      string
	Amount       int64
	Status       string // started | done
	Code         int    // saved response status; 0 while started
	Created      time.Time
	Hits         int // requests that found the key already there
}

// ChargeRow is one row of the charges table.
type ChargeRow struct {
	ID      string // DOM id
	Charge  string // charge id, when known
	Scope   string
	Key     string
	OrderID string
	Amount  int64
	Time    time.Time
	Repeat  bool // this order was already charged once
}

// OrderCount is how many times one order was charged.
type OrderCount struct {
	// ID names the order's item in the page, the same in every frame.
	ID      string
	Scope   string
	OrderID string
	Charges int
}

// Counters are the numbers above the tables.
type Counters struct {
	Requests   int
	Charges    int
	Replays    int
	Conflicts  int // 409
	Mismatches int // 422
	Rejected   int // 400 and the other refusals before any work
	Lost       int // responses lost
	Orders     []OrderCount
	// Twice is how many orders have more than one charge, and MoreOrders
	// how many charged orders the list leaves out.
	Twice      int
	MoreOrders int
}

// FaultSwitches is what the switch panel shows: the room's fault switches
// and how far its clock runs ahead.
type FaultSwitches struct {
	pay.Faults
	ClockOffset time.Duration
}

// Live is everything the live panels show at one moment: the state after
// event Seq.
type Live struct {
	// Epoch and Seq are the event the panels are drawn at: the page's
	// stream resumes after it (web/live's EventID).
	Epoch string
	Seq   uint64
	// Place is the place in the room's order of the newest room event
	// drawn (web/live's Place, as text; "" for none): on a cluster the
	// stream can resume from it on another server.
	Place    string
	Now      time.Time // the server's clock, for ages
	Timeline []TimelineRow
	Keys     []KeyRow
	Charges  []ChargeRow
	Counters Counters
	Faults   FaultSwitches
	// Steps is step mode's bar as the live stream drew it up to Seq.
	Steps StepBar
}

// ShortKey shortens a key for tables: its first eight characters.
func ShortKey(k string) string {
	if len(k) <= 10 {
		return k
	}
	return k[:8] + "…"
}

// ScopeLabel turns a scope into a short name that shows whose request a
// row is without showing the cookie or token itself.
func ScopeLabel(scope string) string {
	switch {
	case strings.HasPrefix(scope, "session:"):
		return "browser " + prefix(strings.TrimPrefix(scope, "session:"), 4)
	case strings.HasPrefix(scope, "token:"):
		return "token " + prefix(strings.TrimPrefix(scope, "token:"), 4)
	case strings.HasPrefix(scope, "anonymous:"):
		return "anonymous " + prefix(strings.TrimPrefix(scope, "anonymous:"), 4)
	case scope == "":
		return "—"
	}
	return scope
}

func prefix(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// Age says how long ago t was, relative to now, in a few characters.
func Age(now, t time.Time) string {
	d := now.Sub(t)
	switch {
	case d < time.Second:
		return "now"
	case d < time.Minute:
		return strconv.Itoa(int(d/time.Second)) + " s"
	case d < time.Hour:
		return strconv.Itoa(int(d/time.Minute)) + " min"
	case d < 48*time.Hour:
		return strconv.Itoa(int(d/time.Hour)) + " h"
	}
	return strconv.Itoa(int(d/(24*time.Hour))) + " d"
}

// laneSpan is the CSS class that places a step between two lanes.
func laneSpan(s Step) string {
	a, b := s.From, s.To
	if a == b {
		return "at" + strconv.Itoa(int(a))
	}
	dir := "ltr"
	if b < a {
		a, b, dir = b, a, "rtl"
	}
	return "l" + strconv.Itoa(int(a)) + "-" + strconv.Itoa(int(b)) + " " + dir
}

// serverColours is how many colours tell servers apart on the timeline.
const serverColours = 6

// serverLabelMax is the longest server name a timeline row writes out
// whole (-name allows 40 characters).
const serverLabelMax = 24

// serverLabel shortens a long server name in its middle: a name's start
// (the host) and its end (the port) are what tell servers apart, and the
// row's tooltip holds the whole name.
func serverLabel(name string) string {
	r := []rune(name)
	if len(r) <= serverLabelMax {
		return name
	}
	head := (serverLabelMax - 1) / 2
	return string(r[:head]) + "…" + string(r[len(r)-(serverLabelMax-1-head):])
}

// rowClass gives the row of a request its server's colour: the same for a
// name on every server's pages (it follows from the name alone), so that
// a class sees at a glance which rows one server handled. The name is
// always written too.
func rowClass(r TimelineRow) string {
	if r.Server == "" {
		return "tl-row"
	}
	h := fnv.New32a()
	h.Write([]byte(r.Server))
	return "tl-row srv-" + strconv.Itoa(int(h.Sum32()%serverColours))
}

func stepClass(s Step) string {
	c := "step " + laneSpan(s)
	if s.Lost {
		c += " lost"
	}
	if s.Sent {
		c += " sent"
	}
	return c
}

func badgeClass(b Badge) string {
	t := b.Tone
	if t == "" {
		t = ToneMute
	}
	return "badge " + string(t)
}

func clock(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("15:04:05.000")
}

func isoTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func millis(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }

func itoa(n int) string { return strconv.Itoa(n) }

// codeTone colours a response status.
func codeTone(code int) Tone {
	switch {
	case code == 0:
		return ToneMute
	case code < 300:
		return ToneOK
	case code == 409 || code == 429:
		return ToneWarn
	}
	return ToneBad
}

func fpPrefix(fp string) string { return prefix(fp, 10) }

func amountText(satang int64) string {
	if satang == 0 {
		return ""
	}
	return "฿" + Baht(satang)
}

// serverSwitches and gatewaySwitches are the on/off switches of each
// part, in the order the panel shows them.
func serverSwitches() []pay.FaultSwitch  { return switchesOf(false) }
func gatewaySwitches() []pay.FaultSwitch { return switchesOf(true) }

func switchesOf(gateway bool) []pay.FaultSwitch {
	var out []pay.FaultSwitch
	for _, sw := range pay.FaultSwitches {
		if sw.Gateway == gateway {
			out = append(out, sw)
		}
	}
	return out
}

// activeFaults names the switches that are on.
func activeFaults(f FaultSwitches) []string {
	var on []string
	add := func(b bool, name string) {
		if b {
			on = append(on, name)
		}
	}
	add(f.Server.DelayMS > 0, "delay "+strconv.Itoa(f.Server.DelayMS)+" ms")
	for _, sw := range serverSwitches() {
		add(f.IsOn(sw), sw.Short)
	}
	add(f.Gateway.LatencyMS > 0, "gateway latency "+strconv.Itoa(f.Gateway.LatencyMS)+" ms")
	for _, sw := range gatewaySwitches() {
		add(f.IsOn(sw), sw.Short)
	}
	add(f.Random.Enabled, "random mode")
	return on
}

// CounterTile is one number of the counters panel.
type CounterTile struct {
	ID, Label, Tone string
	N               int
}

// counterTiles lists the counters in the order the panel shows them; the
// ids are what the stream updates.
func counterTiles(c Counters) []CounterTile {
	return []CounterTile{
		{"n-requests", "Requests", "", c.Requests},
		{"n-charges", "Charges", "", c.Charges},
		{"n-replays", "Replays", "info", c.Replays},
		{"n-409", "409 in progress", "warn", c.Conflicts},
		{"n-422", "422 key reused", "bad", c.Mismatches},
		{"n-lost", "Lost responses", "bad", c.Lost},
	}
}

// CounterTiles is counterTiles for the web package, which sends only the
// numbers that changed.
func CounterTiles(c Counters) []CounterTile { return counterTiles(c) }

// orderClass marks an order charged more than once.
func orderClass(o OrderCount) string {
	if o.Charges > 1 {
		return "twice"
	}
	return "once"
}

// orderPlace is where FrameInsertOrder puts its order.
func orderPlace(before string) string {
	if before == "" {
		return "beforeend:#orders-list"
	}
	return "beforebegin:#" + before
}

// OrderIDShared says whether another listed order has the same number
// (two browsers that drew the same one): then each says whose it is.
// The list is in order number, so a twin is a neighbour.
func OrderIDShared(orders []OrderCount, i int) bool {
	return (i > 0 && orders[i-1].OrderID == orders[i].OrderID) ||
		(i+1 < len(orders) && orders[i+1].OrderID == orders[i].OrderID)
}

// BoardStreamView is the value of the view parameter with which the
// board's page (the projector) opens its event stream: it is sent every
// event as it happens, where a phone gets the class's payments in rounds
// (web/board's classInterval).
const BoardStreamView = "board"

// streamURL is the event stream a page drawn from l opens: it resumes
// right after l, and the board's says it is the board's.
func streamURL(l Live, board bool) string {
	u := "/events?since=" + streamSince(l)
	if board {
		u += "&view=" + BoardStreamView
	}
	return u
}

// streamSince is where a page drawn from l resumes its event stream: the
// id of the event it is drawn at (web/live's PlacedEventID).
func streamSince(l Live) string {
	id := l.Epoch + "-" + strconv.FormatUint(l.Seq, 10)
	if l.Place != "" {
		id += "@" + l.Place
	}
	return id
}

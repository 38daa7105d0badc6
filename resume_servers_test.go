package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"paytwice/store/postgres/pgtest"
	"paytwice/web/live"
)

// sseFrame is one frame a page's event stream sent: its id and HTML.
type sseFrame struct{ id, data string }

// place is the frame's place in the room's order, from its id; zero when
// the id carries none.
func (f sseFrame) place() live.Place {
	_, _, p, _ := live.ParsePlacedEventID(f.id)
	return p
}

func (f sseFrame) refresh() bool { return strings.Contains(f.data, "<!--refresh-->") }

// redraws says whether the frame draws every panel again, as a page
// that could not be resumed gets.
func (f sseFrame) redraws() bool {
	return strings.Contains(f.data, "<!--resync-->") || strings.Contains(f.data, `id="timeline"`)
}

// page is a Go live page: it reads one event stream at a time, keeps
// every frame, and resumes where it left off, as EventSource does.
type page struct {
	mu     sync.Mutex
	frames []sseFrame
	ended  chan struct{} // closed when the current stream ends
}

// open reads base's event stream from lastID ("" for a new page) until
// it ends, keeping its frames.
func (p *page) open(ctx context.Context, t *testing.T, base, lastID string) {
	t.Helper()
	res := openEvents(ctx, t, base, lastID)
	ended := make(chan struct{})
	p.mu.Lock()
	p.ended = ended
	p.mu.Unlock()
	go func() {
		defer close(ended)
		defer res.Body.Close()
		r := bufio.NewReader(res.Body)
		var id string
		var lines []string
		frame := false
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			line = strings.TrimSuffix(line, "\n")
			switch {
			case strings.HasPrefix(line, "id: "):
				id = line[4:]
			case line == "event: frame":
				frame = true
			case strings.HasPrefix(line, "data: "):
				lines = append(lines, line[6:])
			case line == "":
				if frame {
					p.mu.Lock()
					p.frames = append(p.frames, sseFrame{id, strings.Join(lines, "\n")})
					p.mu.Unlock()
				}
				id, lines, frame = "", nil, false
			}
		}
	}()
}

func (p *page) all() []sseFrame {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]sseFrame(nil), p.frames...)
}

func (p *page) lastID() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.frames) == 0 {
		return ""
	}
	return p.frames[len(p.frames)-1].id
}

// shows says whether the page's frames drew order's row.
func (p *page) shows(order string) bool {
	for _, f := range p.all() {
		if strings.Contains(f.data, order) {
			return true
		}
	}
	return false
}

// A page on one server of a cluster whose server stops resumes on
// another: it gets every room event after its last one, once each and in
// the room's order, and no frame that draws the room again.
func TestAPageResumesOnAnotherServerOfTheCluster(t *testing.T) {
	t.Run("SIGKILL", func(t *testing.T) { testResumeOnAnotherServer(t, syscall.SIGKILL) })
	t.Run("SIGTERM", func(t *testing.T) { testResumeOnAnotherServer(t, syscall.SIGTERM) })
}

// gapMessage is in every gap's row (web/room, web/relay.go): the events
// in between are not drawn and the tables reloaded.
const gapMessage = "the tables are reloaded from the database"

// gapText is the message of the first gap the frames drew, "" if none.
func gapText(frames []sseFrame) string {
	for _, f := range frames {
		if i := strings.Index(f.data, gapMessage); i >= 0 {
			start := strings.LastIndex(f.data[:i], ">") + 1
			return f.data[start : i+len(gapMessage)]
		}
	}
	return ""
}

// stepsOf matches the frames' arrows added to a row, and rowsOf the rows
// they start.
var (
	stepsOf = regexp.MustCompile(`beforeend:#(tl-[^"]+)-steps`)
	rowsOf  = regexp.MustCompile(`<li[^>]* id="(tl-[^"]+)"`)
	drawsOf = regexp.MustCompile(`<li[^>]* id="(tl-[^"]+)"|beforeend:#(tl-[^"]+)-steps`)
)

func testResumeOnAnotherServer(t *testing.T, sig syscall.Signal) {
	url := pgtest.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := binary(t)
	servers := startServers(ctx, t, bin, url)
	a, b, c := servers[0], servers[1], servers[2]

	moved := &page{} // opens on a, resumes on b
	moved.open(ctx, t, a.url, "")
	ref := &page{} // on b all along
	ref.open(ctx, t, b.url, "")

	n := 0
	pay := func(s *process) string {
		n++
		order := fmt.Sprintf("resume-%d", n)
		if r := s.do(ctx, http.MethodPost, "/v1/payments", order, fmt.Sprintf(`{"order_id":%q,"amount_satang":%d}`, order, 100+n)); r.status != http.StatusCreated {
			t.Fatalf("payment %s on %s: %d %s %v", order, s.url, r.status, r.body, r.err)
		}
		return order
	}
	// Until the servers have heard each other, each keeps its events to
	// itself: one payment on each other server drawn on a's page says
	// they have.
	for _, s := range []*process{b, c} {
		heard := false
		for range 20 {
			order := pay(s)
			for range 40 {
				if heard = moved.shows(order); heard {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			if heard {
				break
			}
		}
		if !heard {
			t.Fatalf("a's page never drew a payment on %s", s.url)
		}
	}
	start := len(moved.all())
	// The room goes on: payments on every server, a's included.
	for _, s := range []*process{a, b, c, a, b, c} {
		pay(s)
	}
	last := pay(b)
	poll(ctx, t, "a's page to draw "+last, func() bool { return moved.shows(last) })

	// a stops; payments go on meanwhile, which the page never saw.
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		_ = a.cmd.Process.Signal(sig)
		<-a.exited
	}()
	after := []string{pay(b), pay(c)}
	<-stopped
	<-moved.ended
	from := moved.lastID()
	if moved.all()[len(moved.all())-1].place().IsZero() {
		t.Fatalf("a's last frame %q names no place in the room's order", from)
	}
	seenOnA := len(moved.all())
	moved.open(ctx, t, b.url, from)
	after = append(after, pay(c), pay(b))
	for _, o := range after {
		poll(ctx, t, "the resumed page to draw "+o, func() bool { return moved.shows(o) })
		poll(ctx, t, "b's own page to draw "+o, func() bool { return ref.shows(o) })
	}

	// Both pages now take b's frames; they are compared once they have
	// drawn up to the same place, each read at that moment: a later read
	// of b's own page holds arrows the moved page is still being sent.
	var got, refAll []sseFrame
	poll(ctx, t, "the resumed page and b's own page to reach the same place", func() bool {
		got, refAll = moved.all(), ref.all()
		return len(got) > seenOnA && len(refAll) > 0 && lastPlace(got) == lastPlace(refAll)
	})
	resumed := got[seenOnA:]
	// A gap puts a row of b's own on its timeline, and a page from
	// another server is then drawn whole by design
	// (Board.resumePlaceLocked): say which, as nothing in this run should
	// lose an event.
	if gap := gapText(refAll); gap != "" {
		t.Fatalf("b drew a gap, %q: events were lost to it, and a page moving to it is drawn whole", gap)
	}
	if len(resumed) == 0 || resumed[0].redraws() {
		t.Fatalf("the page resumed on b from %q with a frame that draws the room again: %.300s", from, resumed[0].data)
	}
	for _, f := range resumed {
		if f.redraws() {
			t.Fatalf("the resumed page was drawn again whole by frame %s", f.id)
		}
	}
	// In the room's order, once each: every frame but a refresh (which
	// sets totals whole and repeats the id before it) goes past the place
	// before it.
	var prev live.Place
	for i, f := range got[start:] {
		i += start
		p := f.place()
		switch {
		case p.IsZero():
			t.Fatalf("frame %d (%s) names no place", i, f.id)
		case f.refresh() && p == prev:
		case !p.After(prev):
			t.Fatalf("frame %d (%s) is not after the place before it, %v: an event twice or out of order", i, f.id, prev)
		}
		prev = p
	}
	// None skipped: from a's last frame on, the resumed page drew what b's
	// own page drew (which got it in fewer frames, several events each),
	// up to the same place. A frame that holds several events names the
	// last one's place, so one of b's own page may hold events up to a's
	// last frame's place and after it: the two are compared from the
	// first place after which each page's frames hold only later events.
	at := sharedEnd(resumed, refAll, got[seenOnA-1].place())
	want := framesAfter(refAll, at)
	have := framesAfter(resumed, at)
	if len(want) == 0 || len(have) == 0 || have[len(have)-1].place() != want[len(want)-1].place() {
		t.Fatalf("after %v the resumed page drew the events up to\n%v\nb's own page up to\n%v", at, places(have), places(want))
	}
	if fmt.Sprint(drawn(have)) != fmt.Sprint(drawn(want)) {
		t.Fatalf("after %v the resumed page drew rows and arrows\n%v\nb's own page\n%v", at, drawn(have), drawn(want))
	}
	// And every row that a's page and then the resumed page started has,
	// between them, the arrows b's own page drew in it: none twice, none
	// missing.
	count := func(frames []sseFrame) map[string]int {
		n := map[string]int{}
		for _, f := range frames {
			for _, m := range rowsOf.FindAllStringSubmatch(f.data, -1) {
				n[m[1]]++
			}
			for _, m := range stepsOf.FindAllStringSubmatch(f.data, -1) {
				n[m[1]]++
			}
		}
		return n
	}
	mine, theirs := count(got[start:]), count(refAll)
	rows := 0
	for _, f := range got[start:] {
		for _, m := range rowsOf.FindAllStringSubmatch(f.data, -1) {
			rows++
			if row := m[1]; mine[row] != theirs[row] {
				t.Errorf("row %s: %d arrows on the page that moved, %d on b's own page", row, mine[row], theirs[row])
			}
		}
	}
	if rows < 10 {
		t.Errorf("only %d rows started on the page that moved: the test proves little", rows)
	}
}

// lastPlace is the place of the last frame that names one.
func lastPlace(frames []sseFrame) live.Place {
	for i := len(frames) - 1; i >= 0; i-- {
		if p := frames[i].place(); !p.IsZero() {
			return p
		}
	}
	return live.Place{}
}

// sharedEnd is the first place from `from` on (from itself included,
// which the moved page's frames end at) at which a frame of b's own page
// ends and, after from, a frame of the resumed page too: neither page has
// a frame holding events on both sides of it.
func sharedEnd(resumed, ref []sseFrame, from live.Place) live.Place {
	ends := map[live.Place]bool{from: true}
	for _, f := range resumed {
		if !f.refresh() {
			ends[f.place()] = true
		}
	}
	for _, f := range ref {
		if p := f.place(); !f.refresh() && !from.After(p) && ends[p] {
			return p
		}
	}
	return from
}

// framesAfter keeps the frames after place that are not refreshes.
func framesAfter(frames []sseFrame, place live.Place) []sseFrame {
	var out []sseFrame
	for _, f := range frames {
		if f.place().After(place) && !f.refresh() {
			out = append(out, f)
		}
	}
	return out
}

func places(frames []sseFrame) []string {
	out := make([]string, len(frames))
	for i, f := range frames {
		out[i] = f.place().String()
	}
	return out
}

// drawn lists, in order, the rows the frames start and the rows they add
// arrows to.
func drawn(frames []sseFrame) []string {
	var out []string
	for _, f := range frames {
		for _, m := range drawsOf.FindAllStringSubmatch(f.data, -1) {
			if m[1] != "" {
				out = append(out, "+"+m[1])
			} else {
				out = append(out, m[2])
			}
		}
	}
	return out
}

package web

import (
	"sync"
	"time"

	"paytwice/web/board"
	"paytwice/web/live"
)

// workshopNewsEvery is the shortest time between two events that say the
// workshop's scoreboard changed: a run's storm moves a gateway's books
// dozens of times a second, and each event makes every board ask for the
// scoreboard once.
const workshopNewsEvery = 100 * time.Millisecond

// workshopNews tells the boards, over the hub, that the workshop's
// scoreboard changed (board.WorkshopKind) or that this server saved its
// changes where the room's other servers read them
// (board.WorkshopSavedKind, relayed). A change is told at once when the
// last event of its kind is older than workshopNewsEvery, else once that
// much after it: the last change of a burst is never left untold.
type workshopNews struct {
	hub          *live.Hub
	change, save newsPacer
}

func newWorkshopNews(hub *live.Hub) *workshopNews {
	n := &workshopNews{hub: hub}
	n.change.publish = func() { hub.Publish(live.Event{Kind: board.WorkshopKind}) }
	n.save.publish = func() { hub.Publish(live.Event{Kind: board.WorkshopSavedKind}) }
	return n
}

// changed is workshop.Config.Changed: it never blocks.
func (n *workshopNews) changed() { n.change.tell() }

// saved is workshop.Config.Saved.
func (n *workshopNews) saved() { n.save.tell() }

// newsPacer publishes one kind of news at most once per
// workshopNewsEvery.
type newsPacer struct {
	publish func()
	mu      sync.Mutex
	armed   bool      // a publication is scheduled, and will tell this change too
	last    time.Time // when the last publication began
}

func (p *newsPacer) tell() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.armed {
		return
	}
	p.armed = true
	time.AfterFunc(max(0, workshopNewsEvery-time.Since(p.last)), func() {
		p.mu.Lock()
		p.armed, p.last = false, time.Now()
		p.mu.Unlock()
		p.publish()
	})
}

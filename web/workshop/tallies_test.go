package workshop

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"paytwice/pay"
)

// talliesBooks are books whose WorkshopTallies answers tallies, or fails
// while failing is set, and counts how often it was asked; the other
// methods are not used by the boards.
type talliesBooks struct {
	Books
	mu      sync.Mutex
	tallies map[string]pay.WorkshopTally
	failing bool
	asked   int
}

func (b *talliesBooks) WorkshopTallies(context.Context) (map[string]pay.WorkshopTally, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.asked++
	if b.failing {
		return nil, errors.New("the books' server went away")
	}
	return b.tallies, nil
}

func (b *talliesBooks) set(failing bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failing = failing
}

func (b *talliesBooks) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.asked
}

// stepClock is a clock that moves only when told.
type stepClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stepClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// sharedRoom is a workshop run by one server with one student whose run
// is done, saved to a keeper, and a second server sharing its keeper and
// books, which has no student of its own.
func sharedRoom(t *testing.T) (other *Workshop, books *talliesBooks, clock *stepClock) {
	t.Helper()
	ctx := context.Background()
	guard := NewGuard(Nets(netip.MustParsePrefix("127.0.0.2/32")))
	keeper := &memoryKeeper{}
	books = &talliesBooks{}
	clock = &stepClock{now: time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)}
	running := New(Config{Guard: guard, Keeper: keeper, Books: books, Now: clock.Now})
	running.SetOn(true)
	mine, err := running.Register(ctx, "cat", "10.0.0.1", "Cat", "http://127.0.0.2:8000")
	if err != nil {
		t.Fatal(err)
	}
	books.tallies = map[string]pay.WorkshopTally{strings.TrimPrefix(mine.GatewayPath, GatewayPrefix): {Held: 3, Pruned: 1}}
	running.mu.Lock()
	running.students["cat"].run = Run{State: Done, Done: 4, Passed: 4}
	running.changedLocked()
	running.mu.Unlock()
	running.save(ctx)
	other = New(Config{Guard: guard, Keeper: keeper, Books: books, Now: clock.Now})
	return other, books, clock
}

// TestKeptScoreboardWithoutTheBooks: when the books do not answer, a
// server sharing the room still shows the kept rows, their runs as kept,
// and says it does not know their charges instead of a count; once the
// books answer again, the counts are back.
func TestKeptScoreboardWithoutTheBooks(t *testing.T) {
	ctx := context.Background()
	other, books, clock := sharedRoom(t)
	sb, err := other.KeptScoreboard(ctx)
	if err != nil || len(sb.Rows) != 1 || sb.Rows[0].Charges != 4 || sb.Rows[0].Pruned != 1 || sb.Rows[0].ChargesUnknown || sb.ChargesErr != nil {
		t.Fatalf("with the books answering: %+v, %v; want Cat with 4 charges, 1 pruned", sb, err)
	}

	books.set(true)
	clock.add(talliesFresh)
	sb, err = other.KeptScoreboard(ctx)
	if err != nil {
		t.Fatalf("the books failing: %v, want the kept rows all the same", err)
	}
	if len(sb.Rows) != 1 || sb.Rows[0].Name != "Cat" || sb.Rows[0].Run.State != Done || sb.Rows[0].Run.Passed != 4 {
		t.Fatalf("the books failing: rows %+v, want Cat's kept run (done, 4 passed)", sb.Rows)
	}
	if r := sb.Rows[0]; !r.ChargesUnknown || r.Charges != 0 || r.Pruned != 0 {
		t.Errorf("the books failing: %+v, want the charges not known, no count", r)
	}
	if sb.ChargesErr == nil || !strings.Contains(sb.ChargesErr.Error(), "went away") {
		t.Errorf("the books failing: ChargesErr %v, want the books' error", sb.ChargesErr)
	}

	books.set(false)
	clock.add(talliesFresh)
	sb, err = other.KeptScoreboard(ctx)
	if err != nil || len(sb.Rows) != 1 || sb.Rows[0].ChargesUnknown || sb.Rows[0].Charges != 4 || sb.ChargesErr != nil {
		t.Fatalf("the books back: %+v, %v; want Cat's 4 charges again", sb, err)
	}
}

// TestKeptScoreboardReadsTheBooksOncePerFreshness: boards fetched at
// once, and within talliesFresh of a read, share that read of the books
// (its failure too); the first fetch after it reads them again.
func TestKeptScoreboardReadsTheBooksOncePerFreshness(t *testing.T) {
	ctx := context.Background()
	other, books, clock := sharedRoom(t)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if sb, err := other.KeptScoreboard(ctx); err != nil || len(sb.Rows) != 1 || sb.Rows[0].Charges != 4 {
				t.Errorf("a board among 8 at once: %+v, %v", sb, err)
			}
		}()
	}
	wg.Wait()
	if n := books.count(); n != 1 {
		t.Fatalf("8 boards at once asked the books %d times, want once", n)
	}
	clock.add(talliesFresh - time.Millisecond)
	if _, err := other.KeptScoreboard(ctx); err != nil || books.count() != 1 {
		t.Fatalf("a board within %s of the read: %v, books asked %d times, want still once", talliesFresh, err, books.count())
	}
	clock.add(time.Millisecond)
	books.set(true)
	for range 3 {
		if sb, err := other.KeptScoreboard(ctx); err != nil || !sb.Rows[0].ChargesUnknown {
			t.Fatalf("the books failing: %+v, %v", sb, err)
		}
	}
	if n := books.count(); n != 2 {
		t.Fatalf("three boards after %s, the books failing: books asked %d times in all, want 2", talliesFresh, n)
	}
}

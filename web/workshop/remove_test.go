package workshop

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"paytwice/pay"
	"paytwice/store"
	"paytwice/store/postgres"
	"paytwice/store/postgres/pgtest"
)

// heldBooks are books whose first charge is held on its way in, until
// released: a charge inside a gateway when the presenter removes its
// student.
type heldBooks struct {
	Books
	entered, release chan struct{}
	once             sync.Once

	mu   sync.Mutex
	rows map[string]int // charges kept, by student
}

func (b *heldBooks) RecordWorkshopCharge(_ context.Context, student string, c pay.GatewayCharge, _ int) (pay.GatewayCharge, bool, pay.WorkshopTally, error) {
	b.once.Do(func() {
		close(b.entered)
		<-b.release
	})
	b.mu.Lock()
	defer b.mu.Unlock()
	b.rows[student]++
	return c, true, pay.WorkshopTally{Held: b.rows[student]}, nil
}

func (b *heldBooks) DeleteWorkshopBooks(_ context.Context, students ...string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, s := range students {
		delete(b.rows, s)
	}
	return nil
}

func (b *heldBooks) held() map[string]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[string]int{}
	for k, v := range b.rows {
		out[k] = v
	}
	return out
}

// TestRemovalAndAChargeInFlightAgree: a charge is inside Cat's gateway,
// held on its way to the books, when the presenter removes Cat. The
// removal deletes Cat's books only once that charge has reached them, so
// no row is left that belongs to no student; a charge that enters the
// gateway afterwards (its handler taken before the removal) is refused,
// and writes nothing. Without the fence the removal deleted the books
// first and the held charge then wrote an orphan row.
func TestRemovalAndAChargeInFlightAgree(t *testing.T) {
	ctx := context.Background()
	books := &heldBooks{entered: make(chan struct{}), release: make(chan struct{}), rows: map[string]int{}}
	w := New(Config{Guard: NewGuard(Nets(netip.MustParsePrefix("127.0.0.2/32"))), Books: books, Now: time.Now})
	w.SetOn(true)
	mine, err := w.Register(ctx, "cat", "10.0.0.1", "Cat", "http://127.0.0.2:8000")
	if err != nil {
		t.Fatal(err)
	}
	secret := strings.TrimPrefix(mine.GatewayPath, GatewayPrefix)
	gw, leave, err := w.EnterGateway(secret)
	if err != nil {
		t.Fatal(err)
	}
	defer leave()
	charge := func(key string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/charges", strings.NewReader(`{"order_id": "o-1", "amount": 100}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		rec := httptest.NewRecorder()
		gw.ServeHTTP(rec, req)
		return rec
	}
	first := make(chan *httptest.ResponseRecorder, 1)
	go func() { first <- charge("k-held") }()
	<-books.entered
	fence := w.fenceOf(t, mine)

	removed := make(chan error, 1)
	go func() {
		ok, err := w.Remove(ctx, "Cat")
		if err == nil && !ok {
			err = context.Canceled // no such student: say so below
		}
		removed <- err
	}()
	// The removal has closed Cat's fence (and waits for the held charge)
	// or, without one, has already deleted the books: either way the held
	// charge goes on only now.
	for deadline := time.Now().Add(time.Minute); !fence.isClosed() && len(removed) == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the removal neither closed Cat's fence nor returned within a minute")
		}
	}
	close(books.release)
	if err := <-removed; err != nil {
		t.Fatalf("removing Cat: %v", err)
	}
	if rec := <-first; rec.Code != http.StatusCreated {
		t.Errorf("the charge held when Cat was removed: %d %s, want 201 (charged, then deleted with Cat's books)", rec.Code, rec.Body)
	}
	if rows := books.held(); rows[secret] != 0 {
		t.Errorf("after Cat's removal the books hold %d of Cat's charges, want none: an orphan row", rows[secret])
	}
	// Refused with a sentence that says why, not as an outage of the
	// books (a 503 that asks for the same key again).
	if rec := charge("k-after"); rec.Code != http.StatusGone || !strings.Contains(rec.Body.String(), "The presenter removed this student from the workshop") {
		t.Errorf("a charge inside Cat's gateway after the removal: %d %s, want a 410 saying the presenter removed Cat", rec.Code, rec.Body)
	}
	if rows := books.held(); rows[secret] != 0 {
		t.Errorf("a charge after Cat's removal wrote %d rows, want none", rows[secret])
	}
}

// fenceOf is the fence of the student whose view is mine.
func (w *Workshop) fenceOf(t *testing.T, mine Mine) *booksFence {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if st := w.bySecret[strings.TrimPrefix(mine.GatewayPath, GatewayPrefix)]; st != nil {
		return st.fence
	}
	t.Fatal("Cat is no longer known")
	return nil
}

// TestRemovalWaitsForAChargeOnlyAsLongAsItsContext: a charge is held on
// its way to Cat's books when the presenter removes Cat and then hangs
// up (or the server stops): the removal stops waiting for the charge
// when its context ends, says so, and leaves the books, which the held
// charge still writes to; the next removal (here a reset with nobody
// left) waits for that charge and deletes them. Before, the removal
// waited on a lock that knew no context, for as long as the charge took.
func TestRemovalWaitsForAChargeOnlyAsLongAsItsContext(t *testing.T) {
	books := &heldBooks{entered: make(chan struct{}), release: make(chan struct{}), rows: map[string]int{}}
	w := New(Config{Guard: NewGuard(Nets(netip.MustParsePrefix("127.0.0.2/32"))), Books: books, Now: time.Now})
	w.SetOn(true)
	mine, err := w.Register(context.Background(), "cat", "10.0.0.1", "Cat", "http://127.0.0.2:8000")
	if err != nil {
		t.Fatal(err)
	}
	secret := strings.TrimPrefix(mine.GatewayPath, GatewayPrefix)
	gw, leave, err := w.EnterGateway(secret)
	if err != nil {
		t.Fatal(err)
	}
	defer leave()
	first := make(chan int, 1)
	go func() {
		req := httptest.NewRequest(http.MethodPost, "/charges", strings.NewReader(`{"order_id": "o-1", "amount": 100}`))
		req.Header.Set("Idempotency-Key", "k-held")
		rec := httptest.NewRecorder()
		gw.ServeHTTP(rec, req)
		first <- rec.Code
	}()
	<-books.entered

	fence := w.fenceOf(t, mine)
	hungUp, hangUp := context.WithCancel(context.Background())
	removed := make(chan error, 1)
	go func() {
		ok, err := w.Remove(hungUp, "Cat")
		if ok && err == nil {
			err = errors.New("the removal says it deleted Cat's books while a charge was on its way to them")
		}
		removed <- err
	}()
	for deadline := time.Now().Add(time.Minute); !fence.isClosed(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the removal did not close Cat's fence within a minute")
		}
	}
	hangUp()
	select {
	case err := <-removed:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the removal after its presenter hung up: %v, want it to say it stopped waiting (context.Canceled)", err)
		}
	case <-time.After(time.Minute):
		close(books.release)
		t.Fatal("the removal still waits for the held charge a minute after its presenter hung up")
	}

	close(books.release)
	if code := <-first; code != http.StatusCreated {
		t.Errorf("the charge held through the removal: %d, want 201 (it passed the fence before it closed)", code)
	}
	if rows := books.held(); rows[secret] != 1 {
		t.Fatalf("after the held charge, Cat's books hold %d charges, want the 1 the removal left to the next", rows[secret])
	}
	if n, err := w.Reset(context.Background()); n != 0 || err != nil {
		t.Fatalf("a reset with nobody left: %d removed, %v", n, err)
	}
	if rows := books.held(); rows[secret] != 0 {
		t.Errorf("after the next removal, Cat's books hold %d charges, want none", rows[secret])
	}
}

// holdingBooks are real books whose first charge is held on its way in,
// until released: a charge in flight on one server.
type holdingBooks struct {
	Books
	entered, release chan struct{}
	once             sync.Once
}

func (b *holdingBooks) RecordWorkshopCharge(ctx context.Context, student string, c pay.GatewayCharge, keep int) (pay.GatewayCharge, bool, pay.WorkshopTally, error) {
	b.once.Do(func() {
		close(b.entered)
		<-b.release
	})
	return b.Books.RecordWorkshopCharge(ctx, student, c, keep)
}

// TestRemovalOnOneServerRefusesAChargeInFlightOnAnother: two servers
// share the books (one SQLite file, or one PostgreSQL database) and the
// kept workshop. A charge of Cat's is inside the second server's gateway,
// past its fence, when the presenter removes Cat on the first, which
// deletes Cat's books; the second has not heard of the removal yet. The
// charge then reaches the books: it is refused with the presenter's
// sentence (a 410), and Cat's books hold no row. Before, the books kept
// it, a row of a student no longer there, for good.
func TestRemovalOnOneServerRefusesAChargeInFlightOnAnother(t *testing.T) {
	backends := map[string]func(t *testing.T) Books{
		"SQLite": func(t *testing.T) Books {
			db, err := store.Open(filepath.Join(t.TempDir(), "books.db"), store.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			return db
		},
		"PostgreSQL": func(t *testing.T) Books {
			db, err := postgres.Open(context.Background(), pgtest.NewDatabase(t), postgres.Options{MaxConns: 4})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			return db
		},
	}
	for _, name := range []string{"SQLite", "PostgreSQL"} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			books := backends[name](t)
			keeper := &memoryKeeper{}
			guard := NewGuard(Nets(netip.MustParsePrefix("127.0.0.2/32")))
			first := New(Config{Guard: guard, Keeper: keeper, Books: books, Now: time.Now})
			held := &holdingBooks{Books: books, entered: make(chan struct{}), release: make(chan struct{})}
			second := New(Config{Guard: guard, Keeper: keeper, Books: held, Now: time.Now})
			first.SetOn(true)
			mine, err := first.Register(ctx, "cat", "10.0.0.1", "Cat", "http://127.0.0.2:8000")
			if err != nil {
				t.Fatal(err)
			}
			first.save(ctx)
			if err := second.Restore(ctx); err != nil {
				t.Fatal(err)
			}
			secret := strings.TrimPrefix(mine.GatewayPath, GatewayPrefix)
			gw, leave, err := second.EnterGateway(secret)
			if err != nil {
				t.Fatalf("Cat's gateway on the second server: %v", err)
			}
			defer leave()
			answered := make(chan *httptest.ResponseRecorder, 1)
			go func() {
				req := httptest.NewRequest(http.MethodPost, "/charges", strings.NewReader(`{"order_id": "o-1", "amount": 100}`))
				req.Header.Set("Idempotency-Key", "k-in-flight")
				rec := httptest.NewRecorder()
				gw.ServeHTTP(rec, req)
				answered <- rec
			}()
			<-held.entered

			if ok, err := first.Remove(ctx, "Cat"); !ok || err != nil {
				t.Fatalf("removing Cat on the first server: %v %v", ok, err)
			}
			close(held.release)
			rec := <-answered
			if rec.Code != http.StatusGone || !strings.Contains(rec.Body.String(), "The presenter removed this student from the workshop") {
				t.Errorf("the charge in flight on the second server: %d %s, want a 410 saying the presenter removed Cat", rec.Code, rec.Body)
			}
			all, err := books.WorkshopTallies(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if tally, ok := all[secret]; ok {
				t.Errorf("after Cat's removal Cat's books hold %+v, want nothing: a row of a student no longer there", tally)
			}
		})
	}
}

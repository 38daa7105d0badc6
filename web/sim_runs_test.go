package web

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Students' backoff schedules are worked out one at a time on a server,
// as the herd's sweeps are: a second student's waits its turn (bounded),
// and is answered 429 with Retry-After and a sentence once the wait or
// the queue is past its bound; the presenter's waits for none of them.
// The presenter's payment at work holds every student's run that has its
// turn before it starts, so the one at work and those waiting can be
// seen from outside.
func TestOneStudentsBackoffScheduleAtATimePerServer(t *testing.T) {
	t.Parallel()
	const token = "front-of-the-room"
	env := newTestEnv(t, Config{PresenterToken: token})
	runs := env.Server.sims.backoff
	runs.wait.Store(int64(time.Hour)) // the waits looked at below end only as the test says
	leavePresenter := env.Server.admission.work.presenter.enter()
	defer leavePresenter() // leaving twice counts once
	backoff := func(seed int) string {
		return fmt.Sprintf("%s/api/backoff?base=500ms&cap=8s&retries=5&seed=%d", env.URL, seed)
	}
	turns := func() (atWork bool, students int) {
		runs.gate.mu.Lock()
		defer runs.gate.mu.Unlock()
		return runs.gate.busy, len(runs.gate.rest)
	}

	first := make(chan response, 1)
	go func() { first <- getFrom(t, patientFrom("127.0.0.2"), backoff(1)) }()
	waitUntil(t, "the first student's schedule to have its turn", func() bool { busy, _ := turns(); return busy })
	second := make(chan response, 1)
	go func() { second <- getFrom(t, patientFrom("127.0.0.3"), backoff(2)) }()
	waitUntil(t, "another address's schedule to wait its turn", func() bool { _, n := turns(); return n == 1 })

	if r := getFrom(t, fromAddress("127.0.0.4"), backoff(3), PresenterHeader, token); r.Status != http.StatusOK {
		t.Errorf("the presenter's schedule while students' wait: %d %s", r.Status, r.Body)
	}

	runs.wait.Store(int64(time.Millisecond))
	late := getFrom(t, fromAddress("127.0.0.5"), backoff(4))
	if late.Status != http.StatusTooManyRequests || late.Header.Get("Retry-After") == "" ||
		!strings.Contains(string(late.Body), "one at a time") {
		t.Errorf("a schedule whose wait ran out: %d Retry-After %q %s", late.Status, late.Header.Get("Retry-After"), late.Body)
	}

	runs.wait.Store(int64(time.Hour))
	runs.waiting.Add(backoffQueue - 1) // with the second, the queue is full
	full := getFrom(t, fromAddress("127.0.0.6"), backoff(5))
	runs.waiting.Add(-(backoffQueue - 1))
	if full.Status != http.StatusTooManyRequests || full.Header.Get("Retry-After") == "" ||
		!strings.Contains(string(full.Body), fmt.Sprintf("%d more waiting", backoffQueue)) {
		t.Errorf("a schedule beyond the queue: %d Retry-After %q %s", full.Status, full.Header.Get("Retry-After"), full.Body)
	}

	leavePresenter()
	for _, ch := range []chan response{first, second} {
		if r := <-ch; r.Status != http.StatusOK {
			t.Errorf("a schedule that waited its turn: %d %s", r.Status, r.Body)
		}
	}
	// A run gives its turn back once its answer is written, so the client
	// may read the answer first.
	waitUntil(t, "the last run to give its turn back", func() bool {
		busy, n := turns()
		return !busy && n == 0 && runs.waiting.Load() == 0
	})
}

// Each server has its own simulations' queues: a sweep at work on one
// server of a process holds up no other server's (they were one for the
// whole process, so one test's server waited for another's sweeps).
func TestEachServerHasItsOwnSimulationQueue(t *testing.T) {
	t.Parallel()
	busy := newTestEnv(t, Config{})
	other := newTestEnv(t, Config{})
	if err := busy.Server.sims.herd.gate.acquire(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	defer busy.Server.sims.herd.gate.release()
	if err := busy.Server.sims.backoff.gate.acquire(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	defer busy.Server.sims.backoff.gate.release()
	busy.Server.sims.backoff.wait.Store(int64(time.Hour))
	other.Server.sims.backoff.wait.Store(int64(time.Millisecond)) // a wait behind busy's run would be refused

	seed := time.Now().UnixNano() % 1_000_000_000 // no earlier run's: nothing from the cache
	if r := getFrom(t, fromAddress("127.0.0.2"), fmt.Sprintf("%s/api/herd?min=1&max=2&step=1&trials=1&seed=%d", other.URL, seed)); r.Status != http.StatusOK {
		t.Errorf("a sweep on a server with none at work: %d %s", r.Status, r.Body)
	}
	if r := getFrom(t, fromAddress("127.0.0.2"), other.URL+"/api/backoff?seed=7"); r.Status != http.StatusOK {
		t.Errorf("a schedule on a server with none at work: %d %s", r.Status, r.Body)
	}
}

// A student's sweep steps aside on its own schedule, once per sweepSlice
// of work while other requests are in flight, so that on a server with
// one core the steps of a payment do not each wait out the scheduler's
// time slice behind it; alone on the server it does not, and the
// presenter's sweep never does. Sixteen trials of 50 and 100 clients work
// far longer than sweepSlice, and finish well within herdTimeout under
// -race on a loaded machine (the default run does not).
func TestAStudentsSweepStepsAsideOnItsOwnSchedule(t *testing.T) {
	t.Parallel()
	const token = "front-of-the-room"
	env := newTestEnv(t, Config{PresenterToken: token})
	work := env.Server.admission.work
	sweep := func(seed int, header ...string) {
		t.Helper()
		ip := "127.0.0.2"
		if len(header) > 0 {
			ip = "127.0.0.1"
		}
		if r := getFrom(t, fromAddress(ip), fmt.Sprintf("%s/api/herd?min=50&max=100&step=50&trials=2&seed=%d", env.URL, seed), header...); r.Status != http.StatusOK {
			t.Fatalf("a sweep: %d %s", r.Status, r.Body)
		}
	}
	sweep(11)
	if n := work.pauses.Load(); n != 0 {
		t.Fatalf("a student's sweep alone on the server stepped aside %d times", n)
	}
	// Another request in flight all along, as a class's payments are.
	env.Server.admission.requests.Add(1)
	defer env.Server.admission.requests.Add(-1)
	sweep(12, PresenterHeader, token)
	if n := work.pauses.Load(); n != 0 {
		t.Fatalf("the presenter's sweep stepped aside %d times", n)
	}
	sweep(13)
	if work.pauses.Load() == 0 {
		t.Fatal("a student's default sweep never stepped aside while another request was in flight")
	}
}

// patientFrom is fromAddress for a request held for as long as a test
// says: it waits for its answer's headers without a bound of its own.
func patientFrom(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
}

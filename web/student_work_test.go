package web

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"paytwice/sim"
)

func TestStudentsSimulationsHaveTheirPartOfTheProcessor(t *testing.T) {
	t.Parallel()
	clock := sim.NewManualClock(time.Date(2026, 12, 4, 9, 0, 0, 0, time.UTC))
	l := DefaultLimits
	l.SimulationWork = Rate{Burst: 3000, Every: 4 * time.Millisecond}         // 3 s, then a quarter of a core
	l.AddressSimulationWork = Rate{Burst: 2000, Every: 10 * time.Millisecond} // 2 s, then a tenth
	w := newStudentWork(l, clock.Now)

	leave, _, err := w.admit(context.Background(), "10.0.0.1")
	if err != nil {
		t.Fatalf("a first sweep was refused: %v", err)
	}
	w.spent("10.0.0.1", 2500*time.Millisecond)
	leave()
	t.Run("an address past its part waits for it to come back", func(t *testing.T) {
		_, wait, err := w.admit(context.Background(), "10.0.0.1")
		if err == nil {
			t.Fatal("an address that used 2.5 s of its 2 s started another sweep")
		}
		// 500 ms of debt plus one back, a tenth of a core: 5.01 s.
		if wait < 5*time.Second || wait > 5100*time.Millisecond {
			t.Errorf("it waits %v, want about 5 s", wait)
		}
		if !strings.Contains(err.Error(), "address-simulation-work") {
			t.Errorf("the refusal does not name its limit: %v", err)
		}
	})
	t.Run("another address still has the class's part", func(t *testing.T) {
		leave, _, err := w.admit(context.Background(), "10.0.0.2")
		if err != nil {
			t.Fatalf("%v", err)
		}
		w.spent("10.0.0.2", time.Second)
		leave()
	})
	t.Run("the class past its part waits, whatever the address", func(t *testing.T) {
		_, _, err := w.admit(context.Background(), "10.0.0.3")
		if err == nil || !strings.Contains(err.Error(), "-limits simulation-work") {
			t.Fatalf("a new address started a sweep with the class's time used up: %v", err)
		}
	})
	t.Run("the time comes back", func(t *testing.T) {
		clock.Advance(6 * time.Second)
		for _, ip := range []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"} {
			leave, _, err := w.admit(context.Background(), ip)
			if err != nil {
				t.Errorf("%s after six seconds: %v", ip, err)
				continue
			}
			leave()
		}
	})
}

func TestStudentsSweepsStepAsideForThePresentersPayments(t *testing.T) {
	t.Parallel()
	var p presenterAtWork
	if d := p.wait(context.Background()); d != 0 {
		t.Fatalf("with no payment of the presenter's at work, a sweep waited %v", d)
	}
	leave := p.enter()
	leave2 := p.enter()
	waited := make(chan struct{})
	go func() { p.wait(context.Background()); close(waited) }()
	leave()
	select {
	case <-waited:
		t.Fatal("a sweep went on while one of the presenter's payments was still at work")
	default:
	}
	leave2()
	<-waited // it goes on once none is
	leave2() // leaving twice counts once
	if d := p.wait(context.Background()); d != 0 {
		t.Fatalf("the count went wrong: a sweep waited %v", d)
	}
	t.Run("a sweep whose request ended stops waiting", func(t *testing.T) {
		defer p.enter()()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		p.wait(ctx)
	})
}

func TestAStudentsSweepPastTheClassesPartIsAnswered429(t *testing.T) {
	t.Parallel()
	const token = "front-of-the-room"
	// Room for one sweep's start: the first one runs and puts the class
	// in debt for the time it took, the next new one waits.
	env := newTestEnv(t, Config{PresenterToken: token, Limits: Limits{
		SimulationWork: Rate{Burst: 1, Every: time.Hour}}})
	student := fromAddress("127.0.0.2")
	url := func(seed int) string {
		return fmt.Sprintf("%s/api/herd?min=10&max=20&step=10&trials=2&seed=%d", env.URL, seed)
	}

	if r := getFrom(t, student, url(1)); r.Status != http.StatusOK {
		t.Fatalf("the first sweep: %d %s", r.Status, r.Body)
	}
	r := getFrom(t, student, url(2))
	if r.Status != http.StatusTooManyRequests || r.Header.Get("Retry-After") == "" {
		t.Fatalf("a new sweep with the class's time used: %d Retry-After %q %s", r.Status, r.Header.Get("Retry-After"), r.Body)
	}
	if !strings.Contains(string(r.Body), "simulation-work") {
		t.Errorf("the refusal does not say which limit: %s", r.Body)
	}
	if r := getFrom(t, student, url(1)); r.Status != http.StatusOK {
		t.Errorf("the sweep already run, from the cache: %d", r.Status)
	}
	if r := getFrom(t, student, env.URL+"/api/backoff?base=500ms&cap=8s&retries=5&seed=3"); r.Status != http.StatusTooManyRequests {
		t.Errorf("a backoff schedule with the class's time used: %d", r.Status)
	}
	if r := getFrom(t, fromAddress("127.0.0.1"), url(3), PresenterHeader, token); r.Status != http.StatusOK {
		t.Errorf("the presenter's sweep: %d %s", r.Status, r.Body)
	}
}

// The presenter's payment makes the students' work step aside only while
// it is at work: not while it waits on the delay fault, the gateway's
// latency or step mode (its slot is paused then), nor once it is done.
func TestThePresentersPaymentIsAtWorkOnlyWhileNotPaused(t *testing.T) {
	t.Parallel()
	var p presenterAtWork
	atWork := func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.n > 0
	}
	slot := &paySlot{presenter: &p, leave: p.enter()}
	if !atWork() {
		t.Fatal("a payment just let in is not at work")
	}
	slot.pause()
	if atWork() {
		t.Error("a paused payment still holds the students back")
	}
	slot.resume()
	if !atWork() {
		t.Error("a resumed payment is not at work")
	}
	slot.pause()
	slot.done()
	slot.resume() // after done: nothing
	if atWork() {
		t.Error("a payment done while paused holds the students back")
	}
	slot = &paySlot{presenter: &p, leave: p.enter()}
	slot.done()
	slot.done()
	if atWork() {
		t.Error("a payment done holds the students back")
	}
}

// Runs asked for together from one address cannot all start before their
// time is counted: one is at work, the others are answered 429 after a moment's wait,
// and another address is not held back by it (its run then waits its turn on the
// server, TestOneStudentsBackoffScheduleAtATimePerServer); the address's next run, asked
// for once the last one is answered, is let in. The presenter's payment at work
// holds every admitted run before it starts, so the runs at work can be
// seen from outside while they are.
func TestOneSimulationAtWorkPerAddress(t *testing.T) {
	t.Parallel()
	const token = "front-of-the-room"
	env := newTestEnv(t, Config{PresenterToken: token})
	work := env.Server.admission.work
	atWork := func() []string {
		work.mu.Lock()
		defer work.mu.Unlock()
		var ips []string
		for ip := range work.atWork {
			ips = append(ips, ip)
		}
		slices.Sort(ips)
		return ips
	}
	leavePresenter := work.presenter.enter()
	defer leavePresenter() // leaving twice counts once

	type answer struct {
		status                     int
		retryAfter, body, errorMsg string
	}
	get := func(client *http.Client, url string, header ...string) answer {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			return answer{errorMsg: err.Error()}
		}
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		res, err := client.Do(req)
		if err != nil {
			return answer{errorMsg: err.Error()}
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		return answer{status: res.StatusCode, retryAfter: res.Header.Get("Retry-After"), body: string(body)}
	}
	backoff := func(seed int) string {
		return fmt.Sprintf("%s/api/backoff?base=500ms&cap=8s&retries=5&seed=%d", env.URL, seed)
	}
	within := time.NewTimer(20 * time.Second)
	defer within.Stop()

	const n = 24
	student := fromAddress("127.0.0.2")
	answers := make(chan answer, n)
	ready := make(chan struct{})
	for i := range n {
		go func() { <-ready; answers <- get(student, backoff(i)) }()
	}
	close(ready)
	for range n - 1 {
		select {
		case a := <-answers:
			if a.status != http.StatusTooManyRequests || a.retryAfter == "" || !strings.Contains(a.body, "already has a simulation running") {
				t.Fatalf("a run asked for while another of its address's was at work: %d Retry-After %q %s %s", a.status, a.retryAfter, a.body, a.errorMsg)
			}
		case <-within.C:
			t.Fatalf("%d runs from one address asked for at once: more than one was let in (at work: %v)", n, atWork())
		}
	}
	if got := atWork(); !slices.Equal(got, []string{"127.0.0.2"}) {
		t.Fatalf("at work: %v, want the one run of 127.0.0.2", got)
	}
	if a := get(student, env.URL+"/api/herd?min=10&max=20&step=10&trials=2&seed=1"); a.status != http.StatusTooManyRequests || a.retryAfter == "" {
		t.Errorf("a herd sweep from the address with a run at work: %d Retry-After %q %s", a.status, a.retryAfter, a.body)
	}

	t.Run("the presenter is not held back", func(t *testing.T) {
		presenter := fromAddress("127.0.0.2")
		got := make(chan answer, 4)
		for i := range cap(got) {
			go func() { got <- get(presenter, backoff(100+i), PresenterHeader, token) }()
		}
		for range cap(got) {
			if a := <-got; a.status != http.StatusOK {
				t.Errorf("the presenter's run: %d %s %s", a.status, a.body, a.errorMsg)
			}
		}
	})

	// Another address's run is let in for its address, and waits its
	// turn on the server (one backoff schedule at a time): the wait is
	// lengthened so that it cannot end before the test looks.
	env.Server.sims.backoff.wait.Store(int64(time.Hour))
	other := make(chan answer, 1)
	go func() { other <- get(fromAddress("127.0.0.3"), backoff(1)) }()
	for !slices.Equal(atWork(), []string{"127.0.0.2", "127.0.0.3"}) {
		select {
		case a := <-other:
			t.Fatalf("another address's run was not let in beside it: %d %s %s", a.status, a.body, a.errorMsg)
		case <-within.C:
			t.Fatalf("another address's run never started (at work: %v)", atWork())
		case <-time.After(5 * time.Millisecond):
		}
	}

	leavePresenter()
	for _, ch := range []chan answer{answers, other} {
		if a := <-ch; a.status != http.StatusOK {
			t.Errorf("a run let in: %d %s %s", a.status, a.body, a.errorMsg)
		}
	}
	if a := get(student, backoff(2)); a.status != http.StatusOK {
		t.Errorf("the address's next run, once its last one was answered: %d %s", a.status, a.body)
	}
}

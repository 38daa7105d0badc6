package web

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"paytwice/pay"
	"paytwice/store"
)

// BenchmarkPresenterPaysDuringMischief measures how much a whole
// mischievous class slows the presenter's payments and a well-behaved
// student's, where BenchmarkPresenterPaysDuringFlood measures one flood
// of payments. Each iteration is two rounds, one quiet and one noisy, in
// alternating order; in each the presenter (127.0.0.1, with the token and
// its board's stream open) and a well-behaved student (127.0.1.1, a
// token of its own) pay in turn, presenterRound payments each, one after
// the other. In the noisy round the students, each on loopback addresses
// of their own, hold hundreds of live views, loop on the thundering herd,
// the backoff schedule and the delivery reports (a new bearer token for
// every request from one of them) and flood payments sixteen at a time,
// ignoring every 429.
//
// In a class the students' phones and laptops are other machines: what
// they spend making their requests is not the server's. So the students
// run in a process of their own (this test binary again, running
// TestMischievousStudentsProcess), and on Linux with two processors or
// more the server (with the presenter and the well-behaved student, who
// send one request at a time) is kept on processor 0 and the students on
// processor 1, in quiet and noisy rounds alike (PAYTWICE_MISCHIEF_PIN=0
// leaves them where the system puts them). The reported ratios are the
// noisy rounds' median payment over the quiet rounds', measured in the
// same run. Run it with
//
//	go test ./web -run '^$' -bench PresenterPaysDuringMischief -benchtime 4x
//
// with PAYTWICE_LIMITS to try other shares.
func BenchmarkPresenterPaysDuringMischief(b *testing.B) {
	const token = "front-of-the-room"
	pinned := canPin() && os.Getenv("PAYTWICE_MISCHIEF_PIN") != "0"
	if pinned {
		undo, err := pinProcess(0)
		if err != nil {
			b.Fatal(err)
		}
		defer undo()
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	}
	if os.Getenv("PAYTWICE_MISCHIEF_HEAP_FLOOR") != "0" {
		// The server's process holds a heap floor from its start (main's
		// raiseHeapFloor, 16 MiB): without it, the collector runs every
		// few megabytes while the first noisy round grows the heap (400
		// live views), several times as often as in later rounds, and
		// that round's payments were the outliers.
		floor := make([]byte, 16<<20)
		defer runtime.KeepAlive(floor)
	}
	ledger, err := store.Open(filepath.Join(b.TempDir(), "gateway.db"), store.Options{Schema: pay.SchemaLedger})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ledger.Close() })
	limits, err := ParseLimits(os.Getenv("PAYTWICE_LIMITS"))
	if err != nil {
		b.Fatal(err)
	}
	env := newTestEnvTB(b, Config{Ledger: ledger, PresenterToken: token, Limits: limits})
	presenter := fromAddress("127.0.0.1")
	good := fromAddress("127.0.1.1")
	board, status := openHeld(context.Background(), presenter, env.URL, PresenterHeader, token)
	if board == nil {
		b.Fatalf("the presenter's stream: %d", status)
	}
	defer board.close()

	const presenterRound = 40
	paid := 0
	var answered, refused int64
	type took struct{ presenter, student []time.Duration }
	var gcs uint32
	var paused uint64
	profiles := os.Getenv(roundProfilesEnv)
	round := func(noisy bool, n int) (t took) {
		var students *studentsProcess
		if noisy {
			students = startStudents(b, env.URL, n, pinned)
		}
		if profiles != "" {
			defer profileRound(b, profiles, n, noisy)()
		}
		for range presenterRound {
			paid++
			order := fmt.Sprintf("PM%05d", paid)
			start := time.Now()
			r := payFrom(b, presenter, env.URL, "presenter-"+order, order, "Bearer presenter", PresenterHeader, token)
			t.presenter = append(t.presenter, time.Since(start))
			if r.Status != http.StatusCreated {
				b.Fatalf("the presenter's payment %s: %d %s", order, r.Status, r.Body)
			}
			order = fmt.Sprintf("GS%05d", paid)
			start = time.Now()
			r = payFrom(b, good, env.URL, "good-"+order, order, "Bearer well-behaved")
			t.student = append(t.student, time.Since(start))
			if r.Status != http.StatusCreated {
				b.Fatalf("the well-behaved student's payment %s: %d %s", order, r.Status, r.Body)
			}
		}
		if students != nil {
			a, r := students.stop(b)
			answered, refused = answered+a, refused+r
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		kind := "quiet"
		if noisy {
			kind = "noisy"
		}
		// Each round's figures, to tell an outlier round from the rest and
		// see whether the collector worked more in it.
		b.Logf("round %d %s: presenter median %v max %v, student median %v max %v; %d collections, %v paused",
			n, kind, median(t.presenter).Round(10*time.Microsecond), slices.Max(t.presenter).Round(10*time.Microsecond),
			median(t.student).Round(10*time.Microsecond), slices.Max(t.student).Round(10*time.Microsecond),
			ms.NumGC-gcs, time.Duration(ms.PauseTotalNs-paused))
		gcs, paused = ms.NumGC, ms.PauseTotalNs
		return t
	}

	var quiet, noisy took
	b.ResetTimer()
	for i := range b.N {
		for _, n := range []bool{i%2 == 1, i%2 == 0} {
			t := round(n, i)
			into := &quiet
			if n {
				into = &noisy
			}
			into.presenter = append(into.presenter, t.presenter...)
			into.student = append(into.student, t.student...)
		}
	}
	b.StopTimer()
	q, n := median(quiet.presenter), median(noisy.presenter)
	sq, sn := median(quiet.student), median(noisy.student)
	b.ReportMetric(float64(q.Microseconds())/1000, "quiet-ms")
	b.ReportMetric(float64(n.Microseconds())/1000, "noisy-ms")
	b.ReportMetric(float64(n)/float64(q), "ratio")
	b.ReportMetric(float64(sq.Microseconds())/1000, "student-quiet-ms")
	b.ReportMetric(float64(sn.Microseconds())/1000, "student-noisy-ms")
	b.ReportMetric(float64(sn)/float64(sq), "student-ratio")
	b.ReportMetric(float64(answered)/float64(b.N), "noise-answered/round")
	b.ReportMetric(float64(refused)/float64(b.N), "noise-429/round")
	pin := 0.0
	if pinned {
		pin = 1
	}
	b.ReportMetric(pin, "pinned")
}

// roundProfilesEnv names a directory where BenchmarkPresenterPaysDuringMischief
// writes a CPU profile of each round's payments (round-N-quiet.pprof,
// round-N-noisy.pprof), so that one round, the first noisy one say, can
// be told from the others; -cpuprofile mixes them all.
const roundProfilesEnv = "PAYTWICE_MISCHIEF_PROFILES"

// profileRound starts the CPU profile of round n and returns what ends it.
func profileRound(b *testing.B, dir string, n int, noisy bool) func() {
	kind := "quiet"
	if noisy {
		kind = "noisy"
	}
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("round-%d-%s.pprof", n, kind)))
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// The students' process is told where the server is, which round it is
// and which processor to keep to by its environment.
const (
	studentsServerEnv = "PAYTWICE_MISCHIEF_SERVER"
	studentsRoundEnv  = "PAYTWICE_MISCHIEF_ROUND"
	studentsCPUEnv    = "PAYTWICE_MISCHIEF_CPU"
)

// TestMischievousStudentsProcess is the students' side of
// BenchmarkPresenterPaysDuringMischief, which runs the test binary again
// with it in a process of its own; alone it skips. It sets the class on
// the server, says "students: ready" once their live views are open, and
// stops when its standard input closes, saying how many of their
// requests were answered and how many refused with 429.
func TestMischievousStudentsProcess(t *testing.T) {
	base := os.Getenv(studentsServerEnv)
	if base == "" {
		t.Skip("the students of BenchmarkPresenterPaysDuringMischief, run by it in a process of its own")
	}
	if cpu := os.Getenv(studentsCPUEnv); cpu != "" {
		n, err := strconv.Atoi(cpu)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pinProcess(n); err != nil {
			t.Fatal(err)
		}
		runtime.GOMAXPROCS(1)
	}
	round, _ := strconv.Atoi(os.Getenv(studentsRoundEnv))
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var noise noiseCounts
	held := mischief(ctx, &wg, base, round, &noise)
	fmt.Println("students: ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	stop()
	wg.Wait()
	for _, h := range held {
		h.close()
	}
	fmt.Printf("students: done %d %d\n", noise.answered.Load(), noise.refused.Load())
}

// studentsProcess is the students' process of one noisy round.
type studentsProcess struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *bufio.Scanner
	stderr *bytes.Buffer
}

// startStudents starts the students' process and returns once their live
// views are open.
func startStudents(b *testing.B, base string, round int, pinned bool) *studentsProcess {
	cmd := exec.Command(os.Args[0], "-test.run=^TestMischievousStudentsProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), studentsServerEnv+"="+base, studentsRoundEnv+"="+strconv.Itoa(round))
	if pinned {
		cmd.Env = append(cmd.Env, studentsCPUEnv+"=1")
	}
	p := &studentsProcess{cmd: cmd, stderr: &bytes.Buffer{}}
	cmd.Stderr = p.stderr
	var err error
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	p.out = bufio.NewScanner(stdout)
	p.await(b, "students: ready")
	return p
}

// await reads the process's output up to the line that starts with
// prefix, and returns that line.
func (p *studentsProcess) await(b *testing.B, prefix string) string {
	for p.out.Scan() {
		if line := p.out.Text(); strings.HasPrefix(line, prefix) {
			return line
		}
	}
	_ = p.cmd.Wait()
	b.Fatalf("the students' process ended before saying %q: %s", prefix, p.stderr)
	return ""
}

// stop ends the round's students and returns how many of their requests
// were answered and refused with 429.
func (p *studentsProcess) stop(b *testing.B) (answered, refused int64) {
	p.stdin.Close()
	line := p.await(b, "students: done ")
	if _, err := fmt.Sscanf(line, "students: done %d %d", &answered, &refused); err != nil {
		b.Fatalf("the students' process said %q: %v", line, err)
	}
	for p.out.Scan() { // the rest of what it says, up to its end
	}
	if err := p.cmd.Wait(); err != nil {
		b.Fatalf("the students' process: %v %s", err, p.stderr)
	}
	return answered, refused
}

// noiseCounts are the students' requests answered and refused with 429.
type noiseCounts struct{ answered, refused atomic.Int64 }

func (n *noiseCounts) count(status int) {
	switch {
	case status == http.StatusTooManyRequests:
		n.refused.Add(1)
	case status != 0:
		n.answered.Add(1)
	}
}

// mischief sets a class of students on the server until ctx ends: it
// returns once their live views are open, the loops running on wg.
// Every loop is bounded in count as well.
func mischief(ctx context.Context, wg *sync.WaitGroup, base string, round int, noise *noiseCounts) []*heldStream {
	var held []*heldStream
	for _, ip := range []string{"127.0.0.2", "127.0.0.6"} {
		client := fromAddress(ip)
		for range 200 {
			if h, status := openHeld(ctx, client, base); h != nil {
				held = append(held, h)
			} else {
				noise.count(status)
			}
		}
	}
	get := func(client *http.Client, url, auth string) int {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		return statusOf(client.Do(req))
	}
	post := func(client *http.Client, url, body, auth string) int {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, stringsReader(body))
		req.Header.Set("Content-Type", "application/json")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		return statusOf(client.Do(req))
	}
	for a, ip := range []string{"127.0.0.3", "127.0.0.4", "127.0.0.8"} {
		client := fromAddress(ip)
		for w := range 2 {
			wg.Go(func() {
				for i := 0; i < 5000 && ctx.Err() == nil; i++ {
					auth := ""
					if a == 2 { // a new token for every request
						auth = "Bearer mint-" + uuid.NewString()
					}
					var status int
					switch i % 3 {
					case 0:
						status = post(client, base+"/api/delivery", fmt.Sprintf(`{"attempt":%q,"received":false,"why":"noise %d"}`, uuid.NewString(), i), auth)
					case 1:
						status = get(client, base+fmt.Sprintf("/api/backoff?base=500ms&cap=8s&retries=5&seed=%d", i), auth)
					default:
						status = get(client, base+fmt.Sprintf("/api/herd?seed=%d%d%d%d", round, a, w, i), auth)
					}
					noise.count(status)
				}
			})
		}
	}
	flooder := fromAddress("127.0.0.5")
	for w := range 16 {
		wg.Go(func() {
			for i := 0; i < 2000 && ctx.Err() == nil; i++ {
				noise.count(floodPay(ctx, flooder, base, fmt.Sprintf("M%d-%d-%d", round, w, i), "Bearer flood"))
			}
		})
	}
	return held
}

// statusOf reads an answer to its end and returns its status, 0 when
// there was none.
func statusOf(res *http.Response, err error) int {
	if err != nil {
		return 0
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, res.Body)
	return res.StatusCode
}

func stringsReader(s string) io.Reader { return strings.NewReader(s) }

package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// viewers are live pages that a bench keeps open during its run (-viewers):
// each reads GET /events as a browser's EventSource does. The first is the
// board (the projector's page: ?view=board); the others are phones, and
// with -callers each is one caller's (its token on the stream, as a
// phone's session cookie is), round the callers. A sample of them notes
// when each payment's key row first arrives marked done, so that the run
// can report how long a payment's 201 took to reach the board, the
// payer's own phone and every phone.
type viewers struct {
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	open    atomic.Int64
	lost    atomic.Int64 // streams that ended before the run did
	prefix  string
	callers int // -callers; 0: one caller, and no phone is any payment's

	// paid holds when each key's 201 arrived; shown the delays measured:
	// to the phones (every payment), to the payer's own phones, to the
	// board.
	mu                     sync.Mutex
	paid                   map[string]time.Time
	seen                   map[string]int // key → how many sampled viewers saw it done
	delay, ownDelay, board []time.Duration
}

// viewerSample is how many of the viewers measure delays: one in ten, so
// that parsing frames in this process stays a small cost next to the
// server's.
const viewerSample = 10

// openViewers opens n event streams at base and waits until all of them
// have answered: the board's, then n-1 phones', each of the callers'
// (-callers) in turn when callers > 0.
// Only keys that start with prefix (this run's) are timed.
func openViewers(ctx context.Context, base, prefix string, n, callers int) (*viewers, error) {
	ctx, cancel := context.WithCancel(ctx)
	v := &viewers{cancel: cancel, prefix: prefix, callers: callers, paid: map[string]time.Time{}, seen: map[string]int{}}
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 0, MaxIdleConnsPerHost: n, DisableCompression: true}}
	ready := make(chan error, n)
	for i := range n {
		v.wg.Go(func() {
			url, caller := base+"/events", -1
			if i == 0 {
				url += "?view=board"
			} else if callers > 0 {
				caller = i % callers
			}
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				ready <- err
				return
			}
			req.Header.Set("Accept", "text/event-stream")
			if caller >= 0 {
				req.Header.Set("Authorization", "Bearer "+prefix+"caller-"+strconv.Itoa(caller))
			}
			// As a phone's browser does: the server may send the frames
			// gzip-encoded. Only the sampled viewers inflate them; the
			// others' inflating happens on phones, not in this process.
			req.Header.Set("Accept-Encoding", "gzip")
			res, err := client.Do(req)
			if err == nil && res.StatusCode != http.StatusOK {
				res.Body.Close()
				err = fmt.Errorf("GET /events: %s", res.Status)
			}
			ready <- err
			if err != nil {
				return
			}
			defer res.Body.Close()
			v.open.Add(1)
			defer v.open.Add(-1)
			if i%viewerSample == 0 {
				body := io.Reader(res.Body)
				if res.Header.Get("Content-Encoding") == "gzip" {
					zr, err := gzip.NewReader(res.Body)
					if err != nil {
						return
					}
					body = zr
				}
				v.read(body, i == 0, caller)
			} else {
				_, _ = io.Copy(io.Discard, res.Body)
			}
			if ctx.Err() == nil {
				v.lost.Add(1)
			}
		})
	}
	var first error
	for range n {
		if err := <-ready; err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		v.close()
		return nil, first
	}
	return v, nil
}

// doneRow is how a key row marked done starts in a frame; the key follows
// in the title of its code element.
var (
	doneRow  = []byte(`class="key-done"`)
	keyTitle = []byte(`<code title="`)
)

// read follows one stream, the board's or the phone of caller (-1: of
// none), and notes when each key is first shown done. A done row is drawn
// again whenever its panel is (the newest keys' panel on each change, the
// whole page after a gap): only its first showing on this stream is a
// delivery.
func (v *viewers) read(r io.Reader, board bool, caller int) {
	br := bufio.NewReaderSize(r, 64<<10)
	already := map[string]bool{}
	for {
		line, err := br.ReadSlice('\n')
		if err != nil && err != bufio.ErrBufferFull {
			return
		}
		for {
			i := bytes.Index(line, doneRow)
			if i < 0 {
				break
			}
			line = line[i+len(doneRow):]
			j := bytes.Index(line, keyTitle)
			if j < 0 {
				break
			}
			line = line[j+len(keyTitle):]
			end := bytes.IndexByte(line, '"')
			if end < 0 {
				break
			}
			if key := line[:end]; !already[string(key)] {
				already[string(key)] = true
				v.shown(string(key), time.Now(), board, caller)
			}
		}
	}
}

// shown records that a sampled viewer, the board or caller's phone, saw
// key done at t.
func (v *viewers) shown(key string, t time.Time, board bool, caller int) {
	if !strings.HasPrefix(key, v.prefix) {
		return // a key of an earlier run, in the page's first drawing
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	n := v.seen[key]
	v.seen[key] = n + 1
	var d time.Duration // the frame came before the client had read its 201: none
	if paid, ok := v.paid[key]; ok {
		d = max(0, t.Sub(paid))
	}
	switch {
	case board:
		v.board = append(v.board, d)
		return
	case caller >= 0 && callerIndex(key, v.callers) == caller:
		v.ownDelay = append(v.ownDelay, d)
	}
	v.delay = append(v.delay, d)
}

// paidAt records when key's 201 arrived.
func (v *viewers) paidAt(key string, t time.Time) {
	v.mu.Lock()
	if _, ok := v.paid[key]; !ok && v.seen[key] == 0 {
		v.paid[key] = t
	}
	v.mu.Unlock()
}

func (v *viewers) close() {
	v.cancel()
	v.wg.Wait()
}

// print reports the viewers and the delays they measured: to the phones
// (every payment: 201→viewer), to the payer's own phones (201→own) and to
// the board (201→board).
func (v *viewers) print(w io.Writer, n int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	fmt.Fprintf(w, "viewers     %d open event streams (%d ended early)\n", n, v.lost.Load())
	line := func(name string, delays []time.Duration, who string) {
		d := slices.Clone(delays)
		slices.Sort(d)
		if len(d) == 0 {
			return
		}
		pct := func(p float64) time.Duration { return d[int(p*float64(len(d)-1))] }
		fmt.Fprintf(w, "%-11s p50 %s  p99 %s  max %s (%d deliveries to %s)\n", name, ms(pct(0.5)), ms(pct(0.99)), ms(pct(1)), len(d), who)
	}
	phones, noun := (n-1)/viewerSample, "phones"
	if phones == 1 {
		noun = "phone"
	}
	line("201→viewer", v.delay, fmt.Sprintf("%d sampled %s, every payment", phones, noun))
	line("201→own", v.ownDelay, "the sampled phones, their own caller's payments")
	line("201→board", v.board, "the board")
}

// baseOf is the server's address without the endpoint's path.
func baseOf(url, path string) string { return strings.TrimSuffix(url, path) }

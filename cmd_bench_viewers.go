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
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// viewers are live pages that a bench keeps open during its run (-viewers):
// each reads GET /events as a browser's EventSource does. A sample of them
// notes when each payment's key row first arrives marked done, so that the
// run can report how long a payment's 201 took to reach the pages.
type viewers struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	open   atomic.Int64
	lost   atomic.Int64 // streams that ended before the run did
	prefix string

	// paid holds when each key's 201 arrived; shown the delays measured.
	mu    sync.Mutex
	paid  map[string]time.Time
	seen  map[string]int // key → how many sampled viewers saw it done
	delay []time.Duration
}

// viewerSample is how many of the viewers measure delays: one in ten, so
// that parsing frames in this process stays a small cost next to the
// server's.
const viewerSample = 10

// openViewers opens n event streams at base and waits until all of them
// have answered.
// Only keys that start with prefix (this run's) are timed.
func openViewers(ctx context.Context, base, prefix string, n int) (*viewers, error) {
	ctx, cancel := context.WithCancel(ctx)
	v := &viewers{cancel: cancel, prefix: prefix, paid: map[string]time.Time{}, seen: map[string]int{}}
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 0, MaxIdleConnsPerHost: n, DisableCompression: true}}
	ready := make(chan error, n)
	for i := range n {
		v.wg.Go(func() {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/events", nil)
			if err != nil {
				ready <- err
				return
			}
			req.Header.Set("Accept", "text/event-stream")
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
				v.read(body)
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

// read follows one stream and notes when each key is first shown done.
// A done row is drawn again whenever its panel is (the newest keys' panel
// on each change, the whole page after a gap): only its first showing on
// this stream is a delivery.
func (v *viewers) read(r io.Reader) {
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
				v.shown(string(key), time.Now())
			}
		}
	}
}

// shown records that a sampled viewer saw key done at t.
func (v *viewers) shown(key string, t time.Time) {
	if !strings.HasPrefix(key, v.prefix) {
		return // a key of an earlier run, in the page's first drawing
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	n := v.seen[key]
	v.seen[key] = n + 1
	if paid, ok := v.paid[key]; ok {
		v.delay = append(v.delay, max(0, t.Sub(paid)))
	} else {
		// The frame came before the client had read its 201: no delay.
		v.delay = append(v.delay, 0)
	}
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

// print reports the viewers and the delays they measured.
func (v *viewers) print(w io.Writer, n int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	d := slices.Clone(v.delay)
	slices.Sort(d)
	pct := func(p float64) time.Duration {
		if len(d) == 0 {
			return 0
		}
		return d[int(p*float64(len(d)-1))]
	}
	fmt.Fprintf(w, "viewers     %d open event streams (%d ended early)\n", n, v.lost.Load())
	if len(d) > 0 {
		fmt.Fprintf(w, "201→viewer  p50 %s  p99 %s  max %s (%d deliveries to %d sampled viewers)\n",
			ms(pct(0.5)), ms(pct(0.99)), ms(pct(1)), len(d), (n+viewerSample-1)/viewerSample)
	}
}

// baseOf is the server's address without the endpoint's path.
func baseOf(url, path string) string { return strings.TrimSuffix(url, path) }

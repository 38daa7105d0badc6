package web

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
)

// stacks is every goroutine's stack in this process, the test's server
// included, as a panic prints them.
func stacks() []byte {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return buf[:n]
		}
		buf = make([]byte, 2*len(buf))
	}
}

// keepStacks writes a dump of stacks to a file that outlives the test
// and returns what to say of it in a failure: the file's name, and
// stacksSummary's. A test that failed once in many runs on a loaded
// machine then says where the server stood, the next time it does.
func keepStacks(dump []byte, watch ...string) string {
	f, err := os.CreateTemp("", "paytwice-stacks-*.txt")
	if err == nil {
		_, err = f.Write(dump)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return fmt.Sprintf("the goroutine dump could not be kept: %v\n", err) + stacksSummary(dump, watch...)
	}
	return fmt.Sprintf("every goroutine's stack: %s\n", f.Name()) + stacksSummary(dump, watch...)
}

// stacksSummary says how many goroutines of a dump waited where, and
// gives in full the stacks that name any of watch (the work a failure
// waited on: a payment's handler, the board's fan writer).
func stacksSummary(dump []byte, watch ...string) string {
	var b strings.Builder
	goroutines := bytes.Split(dump, []byte("\n\n"))
	// where counts the goroutines by their state and the first of their
	// frames in this module's code (or their first frame).
	where := map[string]int{}
	var watched []string
	for _, g := range goroutines {
		lines := strings.Split(string(g), "\n")
		if len(lines) < 2 {
			continue
		}
		state := lines[0]
		if i := strings.Index(state, "["); i >= 0 {
			state = strings.TrimSuffix(state[i+1:], "]:")
			state, _, _ = strings.Cut(state, ",")
		}
		frame := strings.TrimSpace(lines[1])
		for _, l := range lines[1:] {
			if strings.HasPrefix(l, "paytwice/") {
				frame = l
				break
			}
		}
		frame, _, _ = strings.Cut(frame, "(0x")
		where[state+" in "+frame]++
		for _, w := range watch {
			if strings.Contains(string(g), w) {
				watched = append(watched, string(g))
				break
			}
		}
	}
	keys := make([]string, 0, len(where))
	for k := range where {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return where[b] - where[a] })
	fmt.Fprintf(&b, "%d goroutines, by where they stood:\n", len(goroutines))
	for i, k := range keys {
		if i == 40 {
			fmt.Fprintf(&b, "  ... %d places more\n", len(keys)-i)
			break
		}
		fmt.Fprintf(&b, "  %5d %s\n", where[k], k)
	}
	if len(watch) == 0 {
		return b.String()
	}
	fmt.Fprintf(&b, "%d of them in %s:\n", len(watched), strings.Join(watch, ", "))
	for _, g := range watched {
		b.WriteString(g)
		b.WriteString("\n\n")
	}
	return b.String()
}

// stackWatch takes the stacks of every goroutine once a wait has gone on
// for after, while what it waits for is still under way: a request that
// gets no answer is cut short by its client's timeout, and the server's
// goroutines may move on as it hangs up.
type stackWatch struct {
	timer *time.Timer
	mu    sync.Mutex
	dump  []byte
}

func watchStacks(after time.Duration) *stackWatch {
	w := &stackWatch{}
	w.timer = time.AfterFunc(after, func() {
		dump := stacks()
		w.mu.Lock()
		w.dump = dump
		w.mu.Unlock()
	})
	return w
}

// stop ends the watch and returns the stacks it took, nil when the wait
// ended first.
func (w *stackWatch) stop() []byte {
	w.timer.Stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.dump
}

// serverStacks is what a failure of a request to the test's server
// reports of the server: the stacks taken while it was under way (nil:
// none were), or else those of now.
func serverStacks(taken []byte, watch ...string) string {
	if taken == nil {
		taken = stacks()
	}
	return keepStacks(taken, watch...)
}

package board

import (
	"fmt"
	"testing"
)

// BenchmarkWakeRender renders and compresses one wake of four payments
// from four callers, as the fan writer does once per wake for every
// page: go test ./web/board -run '^$' -bench WakeRender -benchmem.
func BenchmarkWakeRender(b *testing.B) {
	tb := newTestBoard(b, nil, 10)
	for i := range 4 {
		for _, e := range payOf(i+1, fmt.Sprintf("token:caller-%d", i), false) {
			tb.hub.Publish(e)
		}
	}
	tb.caughtUp(b)
	tb.mu.Lock()
	var frames []frame
	for i := range tb.held() {
		frames = append(frames, tb.at(i))
	}
	tb.mu.Unlock()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		w := &wake{prev: frames[0].n - 1, last: frames[len(frames)-1].n, frames: frames}
		if len(w.deflate()) == 0 {
			b.Fatal("nothing rendered")
		}
	}
}

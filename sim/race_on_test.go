//go:build race

package sim

// raceDetector is true when the tests run under the race detector, which
// slows the single-goroutine herd runs about tenfold without anything to
// find in them.
const raceDetector = true

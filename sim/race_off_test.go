//go:build !race

package sim

// raceDetector is true when the tests run under the race detector.
const raceDetector = false

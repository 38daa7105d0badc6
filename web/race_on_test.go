//go:build race

package web

// raceDetector says whether the tests run under the race detector.
const raceDetector = true

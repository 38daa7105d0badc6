//go:build race

package main

// raceDetector is true when the tests run under the race detector, which
// makes every goroutine's work several times heavier and so wakes a
// graded client's waits later (clientTurns).
const raceDetector = true

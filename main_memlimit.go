package main

import (
	"fmt"
	"math"
	"runtime/debug"
	"strconv"
	"strings"
)

// defaultMemoryLimit is the soft limit a server sets on the Go runtime's
// memory when GOMEMLIMIT is not set. Without one the collector lets the
// heap grow to twice what is live (GOGC=100): a lecture hall's server
// past some 200,000 payments keeps about 100 MB live (the replay cache's
// newest 100,000 keys, the lab's window, 500 pages' buffers), and its
// resident memory went past 300 MB. Under the limit the collector runs
// earlier instead, once the runtime's memory nears it; it counts the heap
// floor's 16 MB, which is never written and never resident. The memory
// outside Go's heap (SQLite's page cache, thread stacks) is not counted:
// RSS settles some 20-40 MB above the limit's touched part. A server whose
// live heap grows past the limit is not stopped: the runtime then spends
// at most about half the CPU collecting and lets the heap exceed it.
const defaultMemoryLimit = 256 << 20

// minMemoryLimit is the smallest limit -memory-limit takes: below it the
// collector would run all the time for a server's ordinary live heap.
const minMemoryLimit = 64 << 20

// noMemoryLimit is the runtime's value for "no limit".
const noMemoryLimit = math.MaxInt64

// memoryLimitChoice is the soft memory limit a server runs under and
// where it came from, for the log.
type memoryLimitChoice struct {
	bytes  int64  // noMemoryLimit for none
	source string // "the default", "-memory-limit", "PAYTWICE_MEMORY_LIMIT", "GOMEMLIMIT"
}

// chooseMemoryLimit decides the limit: GOMEMLIMIT, the runtime's own
// variable, wins (the runtime has already applied it, and an operator
// who sets it means it); otherwise -memory-limit (or its variable), whose
// default is defaultMemoryLimit, and "off" for none. givenBy names what
// gave flagValue: "" for the default.
func chooseMemoryLimit(flagValue, givenBy string, getenv func(string) string) (memoryLimitChoice, error) {
	if getenv("GOMEMLIMIT") != "" { // the runtime read it, or refused to start
		return memoryLimitChoice{debug.SetMemoryLimit(-1), "GOMEMLIMIT"}, nil
	}
	n, err := parseMemoryLimit(flagValue)
	if err != nil {
		return memoryLimitChoice{}, fmt.Errorf("-memory-limit: %w", err)
	}
	if n != noMemoryLimit && n < minMemoryLimit {
		return memoryLimitChoice{}, fmt.Errorf("-memory-limit must be at least 64MiB, or off, not %q", flagValue)
	}
	if givenBy == "" {
		givenBy = "the default"
	}
	return memoryLimitChoice{n, givenBy}, nil
}

// applyMemoryLimit sets the runtime's soft memory limit to c (GOMEMLIMIT's
// is set already) and returns the limit the runtime now holds.
func applyMemoryLimit(c memoryLimitChoice) int64 {
	if c.source != "GOMEMLIMIT" {
		debug.SetMemoryLimit(c.bytes)
	}
	return debug.SetMemoryLimit(-1)
}

// memoryLimitLine is the start-up log's line for the limit the runtime
// holds.
func memoryLimitLine(held int64, c memoryLimitChoice) string {
	if held == noMemoryLimit {
		return fmt.Sprintf("memory limit: none (%s off)", c.source)
	}
	line := fmt.Sprintf("memory limit: %s for the Go runtime, %s", formatMemoryLimit(held), c.source)
	if c.source == "the default" {
		line += " (-memory-limit or PAYTWICE_MEMORY_LIMIT to change it, off for none)"
	}
	return line
}

// parseMemoryLimit reads a limit as GOMEMLIMIT spells one: a whole number
// of bytes with an optional unit (B, KiB, MiB, GiB, TiB), or "off".
func parseMemoryLimit(s string) (int64, error) {
	if s == "off" {
		return noMemoryLimit, nil
	}
	digits, unit := s, int64(1)
	for _, u := range []struct {
		suffix string
		bytes  int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"B", 1}} {
		if d, ok := strings.CutSuffix(s, u.suffix); ok {
			digits, unit = d, u.bytes
			break
		}
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64/unit {
		return 0, fmt.Errorf("%q is not a size such as 256MiB or 1GiB, nor off", s)
	}
	return n * unit, nil
}

// formatMemoryLimit writes a limit in the largest unit that divides it.
func formatMemoryLimit(n int64) string {
	for _, u := range []struct {
		suffix string
		bytes  int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.bytes && n%u.bytes == 0 {
			return strconv.FormatInt(n/u.bytes, 10) + " " + u.suffix
		}
	}
	return strconv.FormatInt(n, 10) + " B"
}

// formatMemoryLimitFlag writes a limit as -memory-limit takes it.
func formatMemoryLimitFlag(n int64) string {
	return strings.ReplaceAll(formatMemoryLimit(n), " ", "")
}

package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseMemoryLimit(t *testing.T) {
	for in, want := range map[string]int64{
		"256MiB": 256 << 20, "1GiB": 1 << 30, "2TiB": 2 << 40, "512KiB": 512 << 10, "100B": 100, "4096": 4096, "off": noMemoryLimit,
	} {
		if got, err := parseMemoryLimit(in); err != nil || got != want {
			t.Errorf("%q: %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "256MB", "256 MiB", "-1MiB", "1.5GiB", "9999999TiB", "OFF", "MiB"} {
		if got, err := parseMemoryLimit(in); err == nil {
			t.Errorf("%q: %d, want an error", in, got)
		}
	}
	for _, in := range []int64{defaultMemoryLimit, 1 << 30, 3 << 20, 1000} {
		if got, err := parseMemoryLimit(formatMemoryLimitFlag(in)); err != nil || got != in {
			t.Errorf("%d written %q read back %d, %v", in, formatMemoryLimitFlag(in), got, err)
		}
	}
}

// TestServerSetsAMemoryLimit runs the binary: with no GOMEMLIMIT it runs
// under the default limit, -memory-limit changes or lifts it, and
// GOMEMLIMIT wins over both. The log line reads the limit back from the
// runtime (debug.SetMemoryLimit(-1)), so it says what the process holds.
func TestServerSetsAMemoryLimit(t *testing.T) {
	bin := binary(t)
	for _, c := range []struct {
		gomemlimit string
		flags      []string
		want       string
	}{
		{"", nil, "memory limit: 256 MiB for the Go runtime, the default ("},
		{"", []string{"-memory-limit", "1GiB"}, "memory limit: 1 GiB for the Go runtime, -memory-limit\n"},
		{"", []string{"-memory-limit", "off"}, "memory limit: none (-memory-limit off)\n"},
		{"100MiB", nil, "memory limit: 100 MiB for the Go runtime, GOMEMLIMIT\n"},
		{"100MiB", []string{"-memory-limit", "1GiB"}, "memory limit: 100 MiB for the Go runtime, GOMEMLIMIT\n"},
	} {
		t.Run(c.gomemlimit+strings.Join(c.flags, " "), func(t *testing.T) {
			t.Setenv("GOMEMLIMIT", c.gomemlimit) // empty: the runtime sets no limit
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			p := startServer(ctx, t, bin, filepath.Join(t.TempDir(), "paytwice.db"), c.flags...)
			if out := p.stdout.String(); !strings.Contains(out, c.want) {
				t.Errorf("the server's log:\n%s\nwant a line with %q", out, c.want)
			}
		})
	}
}

func TestMemoryLimitUnderTheMinimumIsRefused(t *testing.T) {
	noEnv := func(string) string { return "" }
	if _, err := chooseMemoryLimit("10MiB", "-memory-limit", noEnv); err == nil || !strings.Contains(err.Error(), "at least 64MiB") {
		t.Errorf("10MiB: %v", err)
	}
	if c, err := chooseMemoryLimit("64MiB", "PAYTWICE_MEMORY_LIMIT", noEnv); err != nil || c.bytes != 64<<20 || c.source != "PAYTWICE_MEMORY_LIMIT" {
		t.Errorf("64MiB: %+v, %v", c, err)
	}
}

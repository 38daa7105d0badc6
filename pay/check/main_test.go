package check_test

import (
	"flag"
	"os"
	"runtime"
	"strconv"
	"testing"
)

// TestMain lets the tests that run side by side (t.Parallel) be more than
// the machine's cores: each checks a server of its own, and their time
// goes in waiting on its gateway's latency, holds and Retry-After, not in
// work. An explicit -parallel wins.
func TestMain(m *testing.M) {
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		_ = flag.Set("test.parallel", strconv.Itoa(max(8, runtime.GOMAXPROCS(0))))
	}
	os.Exit(m.Run())
}

//go:build pprof

package main

import (
	"log"
	"net/http"
	_ "net/http/pprof" // the profiles, on the default mux
	"os"
)

// A build with the pprof tag (bench/viewers.sh PROFILE=) serves the
// runtime's profiles at PAYTWICE_PPROF, an address such as
// 127.0.0.1:6060, beside the server: a profile taken under load shows
// where the CPU goes in proportions, which a shared machine's noise
// leaves meaningful where its ratios are not. Ordinary builds have none.
func init() {
	addr := os.Getenv("PAYTWICE_PPROF")
	if addr == "" {
		return
	}
	go func() { log.Println("pprof:", http.ListenAndServe(addr, nil)) }()
}

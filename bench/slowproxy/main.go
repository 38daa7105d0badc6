// Command slowproxy forwards every request to a server after a fixed
// delay: an endpoint 100 ms away, for timing paytwice check against a
// slow API (bench/check.sh). The delay is taken once the request's
// headers are in, before it is forwarded, so every request costs it
// however many run at once.
//
//	go run ./bench/slowproxy -addr 127.0.0.1:18611 -target http://127.0.0.1:18610 -delay 100ms
package main

import (
	"flag"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:18611", "listen address")
	target := flag.String("target", "", "the server's base URL")
	delay := flag.Duration("delay", 100*time.Millisecond, "added before each request is forwarded")
	flag.Parse()
	u, err := url.Parse(*target)
	if err != nil || u.Host == "" {
		log.Fatalf("slowproxy: -target must be a URL such as http://127.0.0.1:8080, not %q", *target)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	// Answers are passed on as they come (event streams, slow bodies).
	proxy.FlushInterval = -1
	proxy.Transport = &http.Transport{MaxIdleConnsPerHost: 256, DisableCompression: true}
	log.Fatal(http.ListenAndServe(*addr, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t := time.NewTimer(*delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
		proxy.ServeHTTP(w, r)
	})))
}

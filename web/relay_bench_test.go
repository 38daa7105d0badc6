package web

import (
	"testing"
	"time"

	"paytwice/web/live"
)

// BenchmarkRemotePayments is what another server's payments cost this
// one once the relay has read them: the sink (remoteEvents) publishes
// each notification's events into the hub and, with a page opened, the
// projector applies them, as on each of three servers at full load. One
// op is one payment of another server; a notification of ten payments
// arrives every 7 ms (two other servers at 700 payments/s each). B/op and
// allocs/op are what a remote payment leaves to the collector; the CPU
// per payment includes the process waking for each notification (the
// "nothing" case wakes alike and receives nothing), which on a machine
// otherwise idle costs more than the work itself.
//
//	go test ./web -run '^$' -bench RemotePayments -benchtime 20000x
func BenchmarkRemotePayments(b *testing.B) {
	for _, tc := range []struct {
		name string
		page bool
	}{{"nothing", false}, {"page=never", false}, {"page=opened", true}} {
		b.Run(tc.name, func(b *testing.B) {
			env := newTestEnvTB(b, Config{})
			if tc.page {
				env.Server.live()
			}
			sink := remoteEvents{env.Server}
			const perNotification = 10
			batches := make([][]live.Entry, 64)
			at := time.Now()
			for i := range batches {
				for j := range perNotification {
					for _, e := range paymentEvents(i*perNotification + j) {
						e.Server, e.Time = "s2", at
						if e.Kind == live.Charged {
							e.Charge = e.Message[len("charge ") : len("charge ")+27]
						}
						batches[i] = append(batches[i], live.Entry{Event: e})
					}
				}
			}
			tick := time.NewTicker(7 * time.Millisecond)
			defer tick.Stop()
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := processCPU()
			for i := range b.N / perNotification {
				<-tick.C
				// The relay hands over events decoded into memory of its own.
				if tc.name != "nothing" {
					sink.Heard(append([]live.Entry(nil), batches[i%len(batches)]...))
				}
			}
			if tc.page {
				waitProjector(b, env)
			}
			cpu := processCPU() - cpu0
			b.StopTimer()
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/payment")
		})
	}
}

package room

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	peerpkg "paytwice/pay/peers" // the benchmark's own peers is a variable
	"paytwice/web/live"
)

// paymentEvents are the events one new payment publishes on a server,
// as the relay sends them.
func relayedPayment(server string, i int, at time.Time) []live.Event {
	req := fmt.Sprintf("rq_%08x", i)
	key := fmt.Sprintf("bench-%08d", i)
	base := live.Event{Request: req, Scope: "anonymous", Key: key, OrderID: key, Amount: 1000, Server: server}
	fp := strings.Repeat(fmt.Sprintf("%02x", i%256), 32)
	steps := []struct {
		kind    live.Kind
		fp      bool
		status  int
		charge  string
		message string
	}{
		{live.Received, false, 0, "", "POST /v1/payments"},
		{live.Claimed, true, 0, "", "key row inserted as started"},
		{live.GatewayCall, true, 0, "", "charging the gateway with the key"},
		{live.GatewayReply, true, 0, "", "the gateway charged"},
		{live.Charged, true, 0, fmt.Sprintf("ch_%024x", i), fmt.Sprintf("charge ch_%024x recorded", i)},
		{live.Completed, true, 201, "", "response saved on the key"},
	}
	var out []live.Event
	for j, s := range steps {
		e := base
		e.Kind, e.Status, e.Charge, e.Message = s.kind, s.status, s.charge, s.message
		e.Time = at.Add(time.Duration(j) * 137 * time.Microsecond)
		if s.fp {
			e.Fingerprint = fp
		}
		out = append(out, e)
	}
	return out
}

// wireRoundTrip writes events as one relay's notifications and reads
// them back as another server does.
func wireRoundTrip(t *testing.T, events []live.Event, limit int) (got []live.Event, notifications int) {
	t.Helper()
	w := newWireWriter(wireHead + "test\n")
	var rec []byte
	flush := func() {
		evs, _, err := decodeNotification(string(w.buf))
		if err != nil {
			t.Fatalf("decoding %q: %v", w.buf, err)
		}
		for _, e := range evs {
			got = append(got, e.Event)
		}
		notifications++
		w.reset(wireHead + "test\n")
	}
	for i := range events {
		rec = w.record(rec[:0], &events[i])
		if w.events > 0 && len(w.buf)+len(rec) > limit {
			flush()
			rec = w.record(rec[:0], &events[i])
		}
		w.add(rec, &events[i])
	}
	flush()
	return got, notifications
}

func TestRelayWireCarriesEveryFieldOfEveryEvent(t *testing.T) {
	at := time.Date(2026, 5, 1, 12, 0, 0, 123456789, time.UTC)
	var events []live.Event
	for i := range 5 {
		events = append(events, relayedPayment("s1", i, at.Add(time.Duration(i)*time.Millisecond))...)
	}
	// Two requests' events interleaved, as concurrent payments publish them.
	events[7], events[8] = events[8], events[7]
	odd := []live.Event{
		// A later event of a request that drops what its first one said.
		{Kind: live.Replayed, Request: "rq_00000001", Time: at, Status: 201},
		// Times need not grow: the demo clock moves back on a reset.
		{Kind: live.Swept, Request: "rq_sweep", Scope: "tok", Key: "k:1", Time: at.Add(-time.Hour), Sweep: live.SweepCharged, Charge: "ch_1", Fault: true, Message: "swept"},
		{Kind: live.Undelivered, Scope: "tok", Attempt: "0b4e2c1a-6f1e-4c57-9d2a-5d7f1b3e9a10", Time: at, Message: "timed out"},
		// No time at all, no request, characters JSON would escape.
		{Kind: live.Gap, Message: "line one\nline two \"quoted\" é 12:3", Server: "s 1"},
		// What a notification cannot carry as it is goes as JSON.
		{Kind: live.Received, Request: "rq_nul", Key: "k\x00ey", OrderID: "bad \xff utf-8", Time: at, Message: "POST /v1/payments"},
		{Kind: live.Claimed, Request: "rq_nul", Key: "k\x00ey", Time: at, Amount: -5},
		{Kind: live.Pruned, Message: "3:x", Time: time.Unix(0, 1).UTC()},
		// A look-up's state, which the records have no tag for.
		{Kind: live.LookedUp, Scope: "tok", OrderID: "A-1", Status: 200, Lookup: "pending", Time: at, Message: "order A-1 looked up: pending"},
	}
	events = append(events, odd...)
	// The presenter's own steps, on either form of record: a payment's
	// first two steps, a sweep, and as JSON a step whose key holds a NUL
	// and a look-up. The steps after them say nothing of it.
	for _, i := range []int{0, 1, 31, 34, 37} {
		events[i].Priority = true
	}

	for _, limit := range []int{MaxPayload, 300} {
		t.Run(fmt.Sprintf("in notifications of at most %d bytes", limit), func(t *testing.T) {
			got, n := wireRoundTrip(t, events, limit)
			if len(got) != len(events) {
				t.Fatalf("%d events came back of %d", len(got), len(events))
			}
			if limit == 300 && n < 5 {
				t.Errorf("%d notifications, want several", n)
			}
			for i := range events {
				want := events[i]
				if strings.ContainsRune(want.Key, 0) {
					// JSON's replacement of what it cannot carry.
					b, _ := json.Marshal(want)
					priority := want.Priority
					want = live.Event{}
					_ = json.Unmarshal(b, &want)
					want.Priority = priority
				}
				if !got[i].Time.Equal(want.Time) {
					t.Errorf("event %d: time %v, want %v", i, got[i].Time, want.Time)
				}
				got[i].Time, want.Time = time.Time{}, time.Time{}
				if got[i] != want {
					t.Errorf("event %d:\n got %+v\nwant %+v", i, got[i], want)
				}
			}
		})
	}
}

func TestRelayWireIsSmallerThanJSON(t *testing.T) {
	events := relayedPayment("s1", 7, time.Now())
	w := newWireWriter(wireHead + "0123456789abcdef\n")
	var rec []byte
	for i := range events {
		rec = w.record(rec[:0], &events[i])
		w.add(rec, &events[i])
	}
	js, _ := json.Marshal(relayBatch{From: "0123456789abcdef", Events: events})
	// A payment's six events are about a fifth of their JSON.
	if len(w.buf)*3 > len(js) {
		t.Errorf("a payment is %d bytes on the wire, %d as JSON: want under a third", len(w.buf), len(js))
	}
	t.Logf("a payment's events: %d bytes, %d as JSON", len(w.buf), len(js))
}

func TestRelayWireRefusesWhatItDidNotWrite(t *testing.T) {
	for _, body := range []string{
		"k7:claimed",        // no end of record
		"k99:claimed\n",     // a length past the end
		"q1:x\n",            // an unknown field
		"k1:x" + "M1:5\n",   // a string never sent
		"k1:xt3:abc\n",      // a time that is not a number
		"k1:x" + "a-1:5\n",  // a negative length
		"kx:claimed\n",      // no length
		"J5:{bad}\n",        // JSON that is not
		"k1:x" + "c2:2x\n",  // a status that is not a number
		"k1:x" + "M2:-1\n",  // a negative message number
		"k1:x" + "a3:1e3\n", // an amount that is not an integer
		"k1:x" + "t1:\n",    // a length that overruns the value
		"k1:x\nk1:y",        // the second record unfinished
		"k1:x" + "m100:a\n", // a message longer than the rest
		"r2:rq" + "k1:x:\n", // a stray colon
		"k1:x" + "s:abc\n",  // an empty length
		"k1:x" + "f01a:x\n", // a length with letters
	} {
		if evs, err := decodeWire(body); err == nil {
			t.Errorf("decodeWire(%q) = %+v, want an error", body, evs)
		}
	}
	if _, _, err := decodeNotification(wireHead + "no newline"); err == nil {
		t.Errorf("a head with no end was read")
	}
}

// discardPeers takes notifications and keeps the last one.
type discardPeers struct {
	Peers
	last     string
	n, bytes int
	numbered uint64 // batches taken by NotifyNumbered
}

func (d *discardPeers) Notify(_ context.Context, _ string, payloads ...string) error {
	for _, p := range payloads {
		d.last, d.n, d.bytes = p, d.n+1, d.bytes+len(p)
	}
	return nil
}

// NotifyNumbered takes a batch as Notify does, numbering it after the
// last.
func (d *discardPeers) NotifyNumbered(ctx context.Context, channel string, payloads ...string) (uint64, error) {
	d.numbered++
	return d.numbered, d.Notify(ctx, channel, payloads...)
}

// sendBatches has r send b.N payments, perBatch a notification, from
// batches in turn, calling after (unless nil) with each batch's number
// once it is sent.
func sendBatches(b *testing.B, r *Relay, batches [][]live.Event, perBatch int, after func(i int)) {
	b.Helper()
	for i := range b.N / perBatch {
		if failed, _ := r.notify(context.Background(), batches[i%len(batches)], false); failed != 0 {
			b.Fatal("not sent")
		}
		if after != nil {
			after(i)
		}
	}
}

// BenchmarkRelay is the relay's work per payment, on the server that
// handled it (send: its six events written as notifications) and on each
// other server (receive: read, and handed to a sink that publishes them
// into a hub, as a server's does). One op is one payment; receive-json
// reads the same payments as JSON, the form notifications had before:
//
//	go test ./web/room -run '^$' -bench Relay -benchtime 20000x
func BenchmarkRelay(b *testing.B) {
	peers := &discardPeers{}
	r := newRelay(RelayConfig{Peers: peers}, "0123456789abcdef")
	at := time.Now()
	const perBatch = 20 // payments in one notification's time
	batches := make([][]live.Event, 64)
	for i := range batches {
		for j := range perBatch {
			batches[i] = append(batches[i], relayedPayment("s1", i*perBatch+j, at)...)
		}
	}
	b.Run("send", func(b *testing.B) {
		b.ReportAllocs()
		peers.bytes = 0
		sendBatches(b, r, batches, perBatch, nil)
		b.ReportMetric(float64(peers.bytes)/float64(max(1, b.N/perBatch*perBatch)), "bytes/payment")
	})
	// A relay in the room's order (Echo) also books each notification's
	// events until it comes back: that is how servers run.
	ordered := newRelay(RelayConfig{Peers: peers, Echo: func([]live.Entry) {}}, "0123456789abcdef")
	b.Run("send-ordered", func(b *testing.B) {
		b.ReportAllocs()
		sendBatches(b, ordered, batches, perBatch, func(int) {
			if _, ok := ordered.echoes.take(peers.last); !ok {
				b.Fatal("a batch sent was not booked")
			}
		})
	})
	// The sending server again, its batches coming back in the room's
	// order: each event is placed and handed to Echo, as a server's own
	// are.
	echoed := newRelay(RelayConfig{Peers: peers, Hub: live.New(0, nil), Echo: func([]live.Entry) {}}, "0123456789abcdef")
	b.Run("send-and-echo", func(b *testing.B) {
		b.ReportAllocs()
		sendBatches(b, echoed, batches, perBatch, func(i int) {
			echoed.takeOwn(peerpkg.Part{G: 1, N: uint64(i + 1), I: 1, K: 1}, 0, peers.last)
		})
	})
	// The same batches as notifications to receive: as written now, and
	// as JSON, for comparison.
	var payloads, payloadsJSON []string
	for i := range batches {
		peers.n = 0
		if failed, _ := r.notify(context.Background(), batches[i], false); failed != 0 || peers.n != 1 {
			b.Fatalf("a batch went out in %d notifications, want 1", peers.n)
		}
		payloads = append(payloads, peers.last)
		js, _ := json.Marshal(relayBatch{From: "0123456789abcdef", Events: batches[i]})
		payloadsJSON = append(payloadsJSON, string(js))
	}
	other := newRelay(RelayConfig{Peers: peers, Sink: &hubSink{hub: live.New(0, nil)}}, "fedcba9876543210")
	for _, form := range []struct {
		name     string
		payloads []string
	}{{"receive", payloads}, {"receive-json", payloadsJSON}} {
		b.Run(form.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := range b.N / perBatch {
				other.receive(form.payloads[i%len(form.payloads)])
			}
		})
	}
}

// An event with no kind still writes its kind as a string, which the
// reader numbers like any other: the strings sent after it keep the
// numbers the writer gave them.
func TestRelayWireNumbersAnEmptyKindAsTheReaderDoes(t *testing.T) {
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	events := []live.Event{
		{Request: "rq_1", Time: at},
		{Kind: live.Received, Request: "rq_2", Time: at, Message: "POST /v1/payments"},
		{Kind: live.Received, Request: "rq_1", Time: at, Message: "POST /v1/payments"},
		{Request: "rq_3", Time: at},
	}
	got, _ := wireRoundTrip(t, events, MaxPayload)
	if len(got) != len(events) {
		t.Fatalf("%d events came back of %d", len(got), len(events))
	}
	for i := range events {
		if !got[i].Time.Equal(events[i].Time) {
			t.Errorf("event %d: time %v, want %v", i, got[i].Time, events[i].Time)
		}
		got[i].Time = events[i].Time
		if got[i] != events[i] {
			t.Errorf("event %d:\n got %+v\nwant %+v", i, got[i], events[i])
		}
	}
}

// Command startup measures how soon paytwice serves after exec: on a big
// database (bench/bigdb) and on an empty one, in alternating rounds, each
// a fresh process on a warm machine (the files already read once).
//
// With -orphans N, each round first writes N keys into the file as a
// crash under load leaves them: started, half of them charged at the
// gateway already. The server finds them before it serves and closes them
// while it does.
//
// A round starts the binary, then asks GET /v1/idempotency-policy every
// millisecond until it answers 200 (ready), then makes one new payment
// (the first 201), notes when the server said its start-up work was done,
// and stops it with SIGTERM. bench/startup.sh builds what it needs and
// runs it.
//
//	go run ./bench/startup -bin /tmp/paytwice -big /tmp/big.db -rounds 5
package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"paytwice/pay"
	"paytwice/store"

	_ "modernc.org/sqlite"
)

func main() {
	bin := flag.String("bin", "", "the paytwice binary")
	big := flag.String("big", "", "the big SQLite file (its gateway file beside it)")
	rounds := flag.Int("rounds", 5, "rounds of each")
	port := flag.Int("port", 18500, "the port the servers listen on, one at a time")
	retention := flag.String("retention", "8760h", "the servers' -retention: a year keeps every key of a year's file")
	orphans := flag.Int("orphans", 0, "keys left started by a crash, written into the file before each start")
	flag.Parse()
	if *bin == "" || *big == "" {
		flag.Usage()
		os.Exit(2)
	}
	empty := filepath.Join(os.TempDir(), fmt.Sprintf("startup-empty-%d.db", os.Getpid()))
	defer func() {
		for _, suffix := range []string{".db", ".db-wal", ".db-shm", "-gateway.db", "-gateway.db-wal", "-gateway.db-shm"} {
			os.Remove(strings.TrimSuffix(empty, ".db") + suffix)
		}
	}()
	addr := fmt.Sprintf("127.0.0.1:%d", *port)
	run := func(db string) result {
		if err := addOrphans(db, *orphans); err != nil {
			fmt.Fprintln(os.Stderr, "startup:", err)
			os.Exit(1)
		}
		r, err := startOnce(*bin, db, addr, *retention)
		if err != nil {
			fmt.Fprintln(os.Stderr, "startup:", err)
			os.Exit(1)
		}
		return r
	}
	// Warm-up: the first start on each file reads it from disk (and
	// migrates the empty one).
	if err := addOrphans(empty, 0); err != nil { // creates and migrates it
		fmt.Fprintln(os.Stderr, "startup:", err)
		os.Exit(1)
	}
	run(empty)
	run(*big)
	var ready, paid, done [2][]time.Duration
	for i := range *rounds {
		order := []int{0, 1}
		if i%2 == 1 {
			order = []int{1, 0}
		}
		for _, which := range order {
			r := run([]string{empty, *big}[which])
			ready[which] = append(ready[which], r.ready)
			paid[which] = append(paid[which], r.paid)
			done[which] = append(done[which], r.startupDone)
			fmt.Printf("round %d %-5s ready %6.1f ms  first 201 %6.1f ms  start-up work done %6.1f ms\n",
				i+1, []string{"empty", "big"}[which], ms(r.ready), ms(r.paid), ms(r.startupDone))
			if r.said != "" {
				fmt.Printf("  server: %s\n", r.said)
			}
		}
	}
	for which, name := range []string{"empty", "big"} {
		fmt.Printf("%-5s median: ready %.1f ms, first 201 %.1f ms, start-up work done %.1f ms (ready: %s)\n", name,
			ms(median(ready[which])), ms(median(paid[which])), ms(median(done[which])), list(ready[which]))
	}
}

type result struct {
	ready, paid, startupDone time.Duration
	said                     string // the server's line saying so
}

// startupDoneLine is how the server's log says its start-up work ended.
const startupDoneLine = "start-up work done"

func startOnce(bin, db, addr, retention string) (result, error) {
	var r result
	cmd := exec.Command(bin, "-addr", addr, "-db", db, "-retention", retention)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return r, err
	}
	cmd.Stderr = os.Stderr
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return r, err
	}
	doneAt := make(chan time.Duration, 1)
	var said string
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if said == "" && strings.Contains(sc.Text(), startupDoneLine) {
				said = sc.Text()
				doneAt <- time.Since(t0)
			}
		}
		if said == "" {
			doneAt <- -1
		}
		io.Copy(io.Discard, out)
	}()
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}()
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: (&net.Dialer{Timeout: 100 * time.Millisecond}).DialContext}}
	deadline := t0.Add(60 * time.Second)
	for {
		if time.Now().After(deadline) {
			return r, fmt.Errorf("%s: not serving after 60 s", db)
		}
		resp, err := client.Get("http://" + addr + "/v1/idempotency-policy")
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				r.ready = time.Since(t0)
				break
			}
		}
		time.Sleep(time.Millisecond)
	}
	key := fmt.Sprintf("startup-%d", time.Now().UnixNano())
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, "http://"+addr+"/v1/payments",
		bytes.NewReader([]byte(`{"order_id":"S-1","amount_satang":100}`)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Authorization", "Bearer startup-bench")
	resp, err := client.Do(req)
	if err != nil {
		return r, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		return r, fmt.Errorf("%s: first payment answered %d", db, resp.StatusCode)
	}
	r.paid = time.Since(t0)
	select {
	case r.startupDone = <-doneAt:
		r.said = said
	case <-time.After(30 * time.Second):
		r.startupDone = -1
	}
	return r, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func list(ds []time.Duration) string {
	var parts []string
	for _, d := range ds {
		parts = append(parts, fmt.Sprintf("%.0f", ms(d)))
	}
	return strings.Join(parts, ", ") + " ms"
}

// addOrphans writes n started keys into the payments file at path, as a
// crash leaves the requests that were at the gateway: every other one
// charged there (the sweep records its charge), the rest not (the sweep
// releases it). The server is not running.
func addOrphans(path string, n int) error {
	if _, err := os.Stat(path); os.IsNotExist(err) {
		for _, f := range []struct {
			path   string
			schema pay.Schema
		}{{path, pay.SchemaPayments}, {strings.TrimSuffix(path, ".db") + "-gateway.db", pay.SchemaLedger}} {
			db, err := store.Open(f.path, store.Options{Schema: f.schema})
			if err != nil {
				return err
			}
			db.Close()
		}
	}
	if n == 0 {
		return nil
	}
	now := time.Now().Add(-time.Second)
	ids := make([]string, n)
	for i := range ids {
		ids[i] = pay.NewID("")
	}
	for _, f := range []struct{ path, stmt string }{
		{path, `INSERT INTO idempotency_keys (scope, key, method, path, fingerprint, order_id, amount_satang, status,
			created_at, locked_at, claim, charge_key) VALUES (?, ?, 'POST', '/v1/payments', ?, ?, 129900, 'started', ?, ?, ?, '')`},
		{strings.TrimSuffix(path, ".db") + "-gateway.db", `INSERT INTO gateway_charges (key, id, order_id, amount_satang, created_at)
			VALUES (? || '|' || ?, 'gw_' || ?, ?, 129900, ?)`},
	} {
		raw, err := sql.Open("sqlite", "file:"+f.path+"?_pragma=busy_timeout(10000)")
		if err != nil {
			return err
		}
		tx, err := raw.Begin()
		if err != nil {
			raw.Close()
			return err
		}
		for i, id := range ids {
			scope, key, order := "token:orphans", "orphan-"+id, "O-"+id
			if strings.Contains(f.stmt, "gateway_charges") {
				if i%2 == 1 {
					continue
				}
				_, err = tx.Exec(f.stmt, scope, key, id, order, now.UnixMilli())
			} else {
				_, err = tx.Exec(f.stmt, scope, key, id, order, now.UnixMilli(), now.UnixMilli(), id)
			}
			if err != nil {
				tx.Rollback()
				raw.Close()
				return err
			}
		}
		if err := tx.Commit(); err != nil {
			raw.Close()
			return err
		}
		raw.Close()
	}
	return nil
}

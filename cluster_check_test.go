package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"paytwice/pay/check"
	"paytwice/store/postgres/pgtest"
	"paytwice/web/room"
)

// TestCheckOnCluster runs the checker through the front door of "paytwice
// cluster" (three servers on one PostgreSQL database): paytwice passes
// every case there too; the lab's lock in memory, which passes the storm
// on one server, fails it across three, for the reason it has: requests
// of one key on two servers take two locks, and both charge.
func TestCheckOnCluster(t *testing.T) {
	dbURL := pgtest.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// A request the front door cut may leave its key started until a
	// sweeper closes it: a short lock timeout keeps that wait short.
	c := startCluster(ctx, t, binary(t), dbURL, "-servers", "3", "-lock-timeout", "5s")
	cfg := check.Config{
		URL:        c.url + "/v1/payments",
		CountURL:   c.url + "/v1/payments?order_id={{id}}",
		CountField: "charges",
		OtherAuth:  "Bearer second-caller",
		Seed:       11,
	}

	t.Run("paytwice passes every case on three servers", func(t *testing.T) {
		rep, err := check.Run(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rep.Results {
			// 12 and 17 need a gateway the endpoint charges through, 18
			// -replay-after.
			if r.Verdict != check.Pass && r.Verdict != check.Info && !(r.Verdict == check.Skip && (r.Case == 12 || r.Case == 17 || r.Case == 18)) {
				t.Errorf("case %d %s: %s %s", r.Case, r.Name, r.Verdict, r.Detail)
			}
		}
		if rep.ExitCode(true) != check.ExitPassed {
			t.Errorf("exit %d, history %+v", rep.ExitCode(true), rep.Linearizability)
		}
		t.Logf("%s in %.1f s", rep.Headline(), rep.Seconds)
	})

	t.Run("with -gateway too: paytwice does not charge through it, which the report notes", func(t *testing.T) {
		gcfg := cfg
		gcfg.Gateway, gcfg.Seed = c.url+"/sim/gateway", 13
		rep, err := check.Run(ctx, gcfg)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Oracle != check.OracleCountURL || len(rep.Notes) != 1 || rep.ExitCode(true) != check.ExitPassed {
			t.Errorf("oracle %q, notes %q, exit %d\n%s", rep.Oracle, rep.Notes, rep.ExitCode(true), rep.Headline())
		}
		t.Logf("%s in %.1f s", rep.Headline(), rep.Seconds)
	})

	t.Run("a lock in memory fails the storm on three servers", func(t *testing.T) {
		const lab = `{"server":{"mode":"memory_lock","check_gap_ms":200}}`
		status, b := c.asPresenter(ctx, t, http.MethodPatch, c.url+"/api/lab", lab)
		var want room.LabSettings
		if status != http.StatusOK || json.Unmarshal(b, &want) != nil {
			t.Fatalf("PATCH /api/lab: %d %s", status, b)
		}
		for name, u := range c.servers {
			poll(ctx, t, "the lab on "+name, func() bool {
				var got room.LabSettings
				status, b := c.asPresenter(ctx, t, http.MethodGet, u+"/api/lab", "")
				return status == http.StatusOK && json.Unmarshal(b, &got) == nil && got == want
			})
		}
		storm := cfg
		storm.Only = []int{4}
		// Other keys and orders than the first run's: its payments are
		// still in the books.
		storm.Seed = 12
		rep, err := check.Run(ctx, storm)
		if err != nil {
			t.Fatal(err)
		}
		r := rep.Results[0]
		if r.Verdict != check.Fail || !r.Safety || !strings.Contains(r.Detail, "different successful bodies") {
			t.Errorf("storm: %s %q; want a safety FAIL for several charges", r.Verdict, r.Detail)
		}
		if rep.ExitCode(false) != check.ExitFailed || rep.Linearizability.Result != "violation" {
			t.Errorf("exit %d, history %+v", rep.ExitCode(false), rep.Linearizability)
		}
	})
}

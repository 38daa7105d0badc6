package web

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestTimelineSaysWhatTheLookUpAnswered: the timeline's line for a
// look-up says the state the server's books gave it, from real events: a
// key claimed and its outcome unknown (a payment that failed halfway) is
// "pending", not "not paid"; an order the server never saw is "never
// seen"; a paid one is found paid.
func TestTimelineSaysWhatTheLookUpAnswered(t *testing.T) {
	t.Parallel()
	env := newFIEnv(t, Config{LockTimeout: 30 * time.Second})
	env.Server.live() // the board follows the events from here on
	lookUp := func(order, wantState string) {
		t.Helper()
		r := env.must(http.MethodGet, "/v1/payments?order_id="+order, "")
		if r.Status != http.StatusOK || !strings.Contains(string(r.Body), `"state":"`+wantState+`"`) {
			t.Fatalf("look-up of %s: %d %s, want state %s", order, r.Status, r.Body, wantState)
		}
	}
	// lookUpRow is what the board's timeline draws for the look-up of
	// order: its arrows' labels and badges, and its outcome.
	lookUpRow := func(order string) string {
		t.Helper()
		var row string
		waitUntil(t, "the board to draw the look-up of "+order, func() bool {
			for _, r := range env.Server.live().Snapshot().Timeline {
				var parts []string
				for _, st := range r.Steps {
					parts = append(parts, st.Label+" ["+st.Badge.Text+"]")
				}
				if all := strings.Join(parts, " | "); strings.Contains(all, "GET ?order_id="+order) {
					row = all + " => " + r.Outcome.Text
					return true
				}
			}
			return false
		})
		return row
	}

	env.setFaults(`{"server":{"fail_halfway":true}}`)
	if r := env.mustPay("halfway", `{"order_id":"L-1","amount_satang":100}`); r.Status != http.StatusInternalServerError {
		t.Fatalf("the payment that fails halfway: %d %s", r.Status, r.Body)
	}
	lookUp("L-1", "pending")
	if row := lookUpRow("L-1"); !strings.Contains(row, "pending: outcome unknown") || strings.Contains(row, "not paid") {
		t.Errorf("the look-up of a key whose outcome is unknown is drawn as: %s", row)
	}

	lookUp("L-9", "never_seen")
	if row := lookUpRow("L-9"); !strings.Contains(row, "never seen") || strings.Contains(row, "not paid") {
		t.Errorf("the look-up of an order never seen is drawn as: %s", row)
	}

	env.setFaults(`{}`)
	if r := env.mustPay("paid", `{"order_id":"L-2","amount_satang":100}`); r.Status != http.StatusCreated {
		t.Fatalf("the payment: %d %s", r.Status, r.Body)
	}
	lookUp("L-2", "paid")
	if row := lookUpRow("L-2"); !strings.Contains(row, "paid") || strings.Contains(row, "not paid") {
		t.Errorf("the look-up of a paid order is drawn as: %s", row)
	}
}

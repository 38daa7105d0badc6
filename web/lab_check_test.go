package web

import (
	"net/http"
	"strings"
	"testing"

	"paytwice/web/room"
)

// TestLabCheck runs the lab page's checker: with the right protocol its
// table passes; with check-then-insert it fails the storm of one key.
func TestLabCheck(t *testing.T) {
	env := newTestEnv(t, Config{})
	run := func(t *testing.T) string {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, env.URL+"/lab/check", nil)
		req.Header.Set("HX-Request", "true")
		r, err := do(req)
		if err != nil || r.Status != http.StatusOK {
			t.Fatalf("POST /lab/check: %v %d %s", err, r.Status, r.Body)
		}
		return string(r.Body)
	}
	t.Run("the right protocol passes", func(t *testing.T) {
		page := run(t)
		if !strings.Contains(page, "PASSED") || strings.Contains(page, ">FAIL") || !strings.Contains(page, "linearizable") || strings.Contains(page, "Mistake") {
			t.Fatalf("table:\n%s", page)
		}
	})
	t.Run("check then insert fails the storm, and the table says why", func(t *testing.T) {
		env.putLab(room.LabSettings{Server: room.LabServer{Mode: room.LabCheckThenInsert, CheckGapMS: 50}})
		page := run(t)
		i := strings.Index(page, "storm of one key")
		if !strings.Contains(page, "FAILED") || i < 0 || !strings.Contains(page[i:], "FAIL (safety)") || !strings.Contains(page, "different successful bodies") ||
			!strings.Contains(page, "Mistake 3, Check first, then insert.") || !strings.Contains(page, "ON CONFLICT DO NOTHING") {
			t.Fatalf("table:\n%s", page)
		}
	})
	t.Run("only the presenter runs it", func(t *testing.T) {
		locked := newTestEnv(t, Config{PresenterToken: "s3cret"})
		r, err := do(mustRequest(t, http.MethodPost, locked.URL+"/lab/check"))
		if err != nil || r.Status != http.StatusForbidden {
			t.Fatalf("%v %d %s", err, r.Status, r.Body)
		}
	})
}

func mustRequest(t *testing.T, method, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

package web

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"paytwice/pay/check"
	"paytwice/views"
	"paytwice/web/lab"
)

// labCheckLimit bounds one run of the checker from the lab page.
const labCheckLimit = 2 * time.Minute

// handleLabCheck is POST /lab/check, the lab's "Run the checker": paytwice
// check against this server's own POST /v1/payments, reached on the
// address the request came in on, with the lab's mistake of the moment,
// and the table of its verdicts for the page. One run at a time: its
// fifty-odd payments show on the class's timeline under two callers of
// their own.
func (s *Server) handleLabCheck(c echo.Context) error {
	r := c.Request()
	addr, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return render(c, http.StatusOK, views.LabCheckReport(views.LabCheck{Message: "This server cannot tell its own address, so the checker has nowhere to send its requests."}))
	}
	if !s.labChecking.CompareAndSwap(false, true) {
		return render(c, http.StatusOK, views.LabCheckReport(views.LabCheck{Message: "The checker is already running; its table appears where it was started."}))
	}
	defer s.labChecking.Store(false)
	base := "http://" + addr.String()
	ctx, cancel := context.WithTimeout(r.Context(), labCheckLimit)
	defer cancel()
	mode := s.lab.Settings().Server.Mode
	rep, err := check.Run(ctx, check.Config{
		URL:        base + paymentsPath,
		CountURL:   base + paymentsPath + "?order_id={{id}}",
		CountField: "charges",
		Header:     http.Header{"Authorization": {"Bearer lab-checker"}},
		OtherAuth:  "Bearer lab-checker-2",
		Seed:       uint64(time.Now().UnixNano()),
	})
	if err != nil {
		return render(c, http.StatusOK, views.LabCheckReport(views.LabCheck{Message: "The checker could not run: " + err.Error()}))
	}
	v := views.LabCheck{Mode: mode, History: rep.HistoryLine(), Summary: rep.Summary(), Failed: rep.ExitCode(false) != check.ExitPassed}
	if m, _, ok := lab.ByMode(mode); ok {
		v.Mistake, v.Fix = "Mistake "+strconv.Itoa(m.N)+", "+m.Title, m.Fix
	}
	for _, res := range rep.Results {
		tone := views.ToneMute
		switch res.Verdict {
		case check.Pass:
			tone = views.ToneOK
		case check.Fail:
			tone = views.ToneBad
		case check.Differs:
			tone = views.ToneWarn
		case check.Info:
			tone = views.ToneInfo
		}
		verdict := string(res.Verdict)
		if res.Safety {
			verdict += " (safety)"
		}
		v.Rows = append(v.Rows, views.LabCheckRow{Case: res.Case, Name: res.Name, Verdict: verdict, Detail: res.Detail, Tone: tone})
	}
	return render(c, http.StatusOK, views.LabCheckReport(v))
}

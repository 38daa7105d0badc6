package web

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"paytwice/pay/check"
	"paytwice/views"
	"paytwice/web/lab"
)

// labCheckLimit bounds one run of the checker from the lab page.
const labCheckLimit = 2 * time.Minute

// runLabCheck runs paytwice check against base's payments endpoint, with
// the lab's mistake of the moment, and returns the table of its verdicts.
// One run at a time.
func (s *Server) runLabCheck(ctx context.Context, base string) views.LabCheck {
	if !s.labChecking.CompareAndSwap(false, true) {
		return views.LabCheck{Message: "The checker is already running; its table appears where it was started."}
	}
	defer s.labChecking.Store(false)
	ctx, cancel := context.WithTimeout(ctx, labCheckLimit)
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
		return views.LabCheck{Message: "The checker could not run: " + err.Error()}
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
	return v
}

package web

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/binary"
	"encoding/hex"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"paytwice/pay/check"
	"paytwice/views"
	"paytwice/web/lab"
	"paytwice/web/room"
)

// labCheckLimit bounds one run of the checker from the lab page.
const labCheckLimit = 2 * time.Minute

// labCheckCredential is a fresh bearer token for one run of the lab's
// checker: 128 random bits.
func labCheckCredential() string {
	return "lab-check-" + hex.EncodeToString(randomBytes(16))
}

// randomBytes are n bytes from crypto/rand, which never fails.
func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

// labChecker runs paytwice check from the lab page, one run at a time,
// and recognises that run's requests. It holds only its own state and a
// way to read the lab's mode.
type labChecker struct {
	// running is set while a run is under way.
	running atomic.Bool
	// auth are the credentials of the run under way, nil between runs.
	auth atomic.Pointer[[2]string]
	// mode is the lab's mistake of the moment (the room's).
	mode func() room.LabMode
}

// fromLabChecker says whether r is one of the lab checker's own
// requests, by the credentials of the run under way: the server's own
// tool takes no student's turn and waits for none.
func (l *labChecker) fromLabChecker(r *http.Request) bool {
	auth := l.auth.Load()
	got := r.Header.Get("Authorization")
	if auth == nil || got == "" {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(got), []byte(auth[0])) == 1 || subtle.ConstantTimeCompare([]byte(got), []byte(auth[1])) == 1
}

// runLabCheck runs paytwice check against base's payments endpoint, with
// the lab's mistake of the moment, and returns the table of its verdicts.
// One run at a time.
func (l *labChecker) runLabCheck(ctx context.Context, base string) views.LabCheck {
	if !l.running.CompareAndSwap(false, true) {
		return views.LabCheck{Message: "The checker is already running; its table appears where it was started."}
	}
	defer l.running.Store(false)
	ctx, cancel := context.WithTimeout(ctx, labCheckLimit)
	defer cancel()
	mode := l.mode()
	auth := [2]string{"Bearer " + labCheckCredential(), "Bearer " + labCheckCredential()}
	l.auth.Store(&auth)
	defer l.auth.Store(nil)
	// Each run is two callers of its own, with credentials drawn for it
	// and never shown: the timeline shows their scopes hashed and the
	// run's keys and ids, none of which a student can send into those
	// scopes, so nobody can change the table the class reads.
	rep, err := check.Run(ctx, check.Config{
		URL:         base + paymentsPath,
		CountURL:    base + paymentsPath + "?order_id={{id}}",
		CountField:  "charges",
		Header:      http.Header{"Authorization": {auth[0]}},
		OtherAuth:   auth[1],
		Seed:        binary.LittleEndian.Uint64(randomBytes(8)),
		Unguessable: true,
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

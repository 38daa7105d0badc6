package room_test

import (
	"strings"
	"testing"
	"time"

	"paytwice/pay"
	"paytwice/web/room"
)

func TestWorkFits(t *testing.T) {
	const timeout = 2 * time.Second
	for _, tc := range []struct {
		name string
		mode room.LabMode
		gap  int
		ok   bool
	}{
		{"the real protocol never pauses, whatever the numbers", room.LabCorrect, 5000, true},
		{"a pause that leaves room for the work", room.LabCheckThenInsert, 900, true},
		{"a pause, a delay and a latency that add up to the time-out", room.LabMemoryLock, 1000, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := room.Defaults()
			s.Lab.Server.Mode, s.Lab.Server.CheckGapMS = tc.mode, tc.gap
			s.Faults.Server.DelayMS, s.Faults.Gateway.LatencyMS = 500, 500
			err := s.WorkFits(timeout)
			if (err == nil) != tc.ok {
				t.Fatalf("WorkFits: %v, want ok %v", err, tc.ok)
			}
			if err != nil && pay.ErrorCode(err) != pay.EINVALID {
				t.Fatalf("code %s, want %s", pay.ErrorCode(err), pay.EINVALID)
			}
		})
	}
}

func TestChangesInWords(t *testing.T) {
	old := room.Defaults()
	next := old
	next.Faults.Server.CrashMidway = true
	next.Faults.Gateway.LatencyMS = 40
	next.Faults.Random = pay.RandomFaults{Enabled: true, Seed: 3, Probability: 0.5}
	if got := strings.Join(room.FaultChanges(old.Faults, next.Faults), "; "); got != "server.crash_midway on; gateway.latency_ms 0 → 40 ms; random mode on (seed 3, probability 0.5)" {
		t.Fatalf("faults: %q", got)
	}
	next.Lab.Server.Mode = room.LabNoKey
	next.Lab.Client.RetryEvery4xx = true
	if got := strings.Join(room.LabChanges(old.Lab, next.Lab), "; "); got != "server.mode correct → no_key; client.retry_every_4xx on" {
		t.Fatalf("lab: %q", got)
	}
	// Every page learns of a change from its event: one that no words
	// tell of would leave the pages' lab badges as they were.
	next.Lab.Server.Servers = 2
	if got := strings.Join(room.LabChanges(old.Lab, next.Lab), "; "); got != "server.mode correct → no_key; server.servers 1 → 2; client.retry_every_4xx on" {
		t.Fatalf("lab with two servers: %q", got)
	}
	one := old.Lab
	one.Server.Servers = 1
	if room.LabChanges(old.Lab, one) != nil {
		t.Fatal("0 servers and 1 are told of as a change; both read as one server")
	}
	if room.FaultChanges(old.Faults, old.Faults) != nil || room.LabChanges(old.Lab, old.Lab) != nil {
		t.Fatal("no change is told of as one")
	}
}

// A reset leaves the defaults, but counts on: the random sequence and the
// narration start again, and the reset under way is kept for its server
// to end.
func TestStateReset(t *testing.T) {
	s := room.Defaults()
	s.SetFaults(pay.Faults{Server: pay.ServerFaults{ServerError: true}})
	s.SetLesson("no-key")
	s.Lab.Server.Mode = room.LabNoKey
	s.ClockOffset = time.Hour
	s.ResetGen = 4
	s.Barrier = &room.Barrier{Gen: 4, By: "me"}
	before := s
	s.Reset()
	if s.Faults != (pay.Faults{}) || s.Lab != room.DefaultLabSettings() || s.Lesson != "" || s.ClockOffset != 0 {
		t.Fatalf("after the reset: %+v", s)
	}
	if !before.FaultsRestarted(s) || !before.LessonRestarted(s) || s.Resets != before.Resets+1 {
		t.Fatalf("the reset did not restart the sequence and the narration: %+v", s)
	}
	if s.ResetGen != 4 || s.Barrier != before.Barrier {
		t.Fatalf("the reset under way was dropped: %+v", s)
	}
}

func TestLabSettingsValidate(t *testing.T) {
	ok := room.DefaultLabSettings()
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, change := range map[string]func(*room.LabSettings){
		"an unknown mode":              func(l *room.LabSettings) { l.Server.Mode = "bogus" },
		"a negative pause":             func(l *room.LabSettings) { l.Server.CheckGapMS = -1 },
		"a pause over the bound":       func(l *room.LabSettings) { l.Server.CheckGapMS = room.MaxLabCheckGapMS + 1 },
		"a retention beyond the clock": func(l *room.LabSettings) { l.Server.RetentionSeconds = room.MaxLabRetentionSeconds + 1 },
	} {
		l := ok
		change(&l)
		if err := l.Validate(); pay.ErrorCode(err) != pay.EINVALID {
			t.Errorf("%s: %v", name, err)
		}
	}
	if (room.LabSettings{}).Normalize().Server.Mode != room.LabCorrect {
		t.Fatal("an empty mode does not read as correct")
	}
}

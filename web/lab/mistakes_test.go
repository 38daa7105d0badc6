package lab

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"paytwice/web/room"
)

// The table is whole: every mistake has its own number and name, its name
// is a field of the outcomes (the panel finds its numbers by it, never by
// its place), and every mode and every browsers' switch the room knows
// belongs to exactly one mistake.
func TestTheTableIsWhole(t *testing.T) {
	fields := map[string]bool{}
	ot := reflect.TypeOf(Outcomes{})
	for i := range ot.NumField() {
		fields[strings.Split(ot.Field(i).Tag.Get("json"), ",")[0]] = true
	}
	seenN, seenName := map[int]bool{}, map[string]bool{}
	modes, clients := map[string]int{}, map[string]int{}
	for i, m := range Mistakes {
		if m.N != i+1 || seenN[m.N] || seenName[m.Name] {
			t.Errorf("mistake %q: number %d at place %d, or a number or name twice", m.Name, m.N, i+1)
		}
		seenN[m.N], seenName[m.Name] = true, true
		if !fields[m.Name] {
			t.Errorf("mistake %q is no field of the outcomes", m.Name)
		}
		if m.Title == "" || len(m.Why) < 200 || m.Try == "" || m.Fix == "" || m.Outcome == nil || len(m.Controls) == 0 {
			t.Errorf("mistake %q lacks its title, page text, fix, outcome or switch", m.Name)
		}
		if (len(m.Modes) == 0) == (m.Client == "") {
			t.Errorf("mistake %q must be made by server modes or by a browsers' switch, one of them", m.Name)
		}
		for _, md := range m.Modes {
			modes[md.Mode]++
		}
		if m.Client != "" {
			clients[m.Client]++
			if m.Summary == "" {
				t.Errorf("mistake %q has no summary", m.Name)
			}
		}
	}
	for _, mode := range room.LabModes {
		if want := 1; mode != room.LabCorrect && modes[mode] != want {
			t.Errorf("mode %q belongs to %d mistakes", mode, modes[mode])
		}
	}
	var all map[string]bool
	b, _ := json.Marshal(room.LabClient{})
	_ = json.Unmarshal(b, &all)
	for field := range all {
		if clients[field] != 1 {
			t.Errorf("the browsers' switch %q belongs to %d mistakes", field, clients[field])
		}
	}
}

func TestOutcomesReadByName(t *testing.T) {
	t.Run("nothing measured yet reads mute, with no extra charges", func(t *testing.T) {
		read, extra := Read(Outcomes{PersonalDataKey: PersonalOutcome{Stored: map[string]int{}}})
		if len(read) != len(Mistakes) || extra != 0 {
			t.Fatalf("%d outcomes, %d extra", len(read), extra)
		}
		for name, o := range read {
			if o.Tone != Mute || o.N != 0 {
				t.Errorf("%s: %+v", name, o)
			}
		}
	})
	t.Run("an order charged twice is red under its own mistake, and counted in the extra charges", func(t *testing.T) {
		var o Outcomes
		o.NewKeyPerRetry = ChargeOutcome{Charges: 3, ChargedTwice: 1, ExtraCharges: 2, Twice: []string{"A-1"}}
		o.MemoryLock = LockOutcome{ChargeOutcome: ChargeOutcome{Charges: 1}}
		read, extra := Read(o)
		nr := read["new_key_per_retry"]
		if nr.Tone != Bad || nr.N != 1 || !strings.HasPrefix(nr.Unit, "order paid under more than one key") || !slices.Contains(nr.Lines, "Charged twice: A-1") {
			t.Errorf("new key per retry: %+v", nr)
		}
		if ml := read["memory_lock"]; ml.Tone != OK || ml.N != 0 {
			t.Errorf("memory lock: %+v", ml)
		}
		if read["no_key"].Tone != Mute || extra != 2 {
			t.Errorf("no key %+v, extra %d", read["no_key"], extra)
		}
	})
	t.Run("check then insert saved by its constraint reads ok", func(t *testing.T) {
		read, _ := Read(Outcomes{CheckThenInsert: RaceOutcome{ConstraintRefusals: 9}})
		if o := read["check_then_insert"]; o.Tone != OK || !strings.Contains(o.Lines[1], "refused 9 INSERTs") {
			t.Errorf("%+v", o)
		}
	})
}

func TestWhatThePagesReadOfTheTable(t *testing.T) {
	t.Run("the summary names what is on, the retention filled in", func(t *testing.T) {
		s := room.LabSettings{Server: room.LabServer{Mode: room.LabKeyTableOnly}, Client: room.LabClient{RetryEvery4xx: true, PersonalDataKey: true}}
		got := strings.Join(On(s, "1 min"), "; ")
		if got != "7 key table only, keys kept 1 min; 4 retry every 4xx; 6 e-mail as key" {
			t.Errorf("summary %q", got)
		}
		if on := On(room.DefaultLabSettings(), "24 h"); len(on) != 0 {
			t.Errorf("every mistake off, yet %v", on)
		}
	})
	t.Run("a storm of one key is explained per mode that can charge it twice", func(t *testing.T) {
		storms := Storms()
		for _, mode := range []string{room.LabNoKey, room.LabCheckThenInsert, room.LabMemoryLock, room.LabKeyTableOnly} {
			if !strings.HasPrefix(storms[mode], " Every request carried the same key") {
				t.Errorf("mode %q: %q", mode, storms[mode])
			}
		}
		if _, ok := storms[room.LabCheckThenInsertConstrained]; ok {
			t.Error("the constrained mode cannot charge a key twice, yet has a storm")
		}
	})
	t.Run("the checker finds the mistake a mode makes, and none for the right protocol", func(t *testing.T) {
		if m, _, ok := ByMode(room.LabCheckThenInsertConstrained); !ok || m.Name != "check_then_insert" {
			t.Errorf("%+v %v", m, ok)
		}
		if _, _, ok := ByMode(room.LabCorrect); ok {
			t.Error("the right protocol is a mistake")
		}
	})
}

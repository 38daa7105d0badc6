package room

import (
	"fmt"
	"time"

	"paytwice/pay"
)

// What the room's rules say of a change: which changes the room refuses,
// and how the timeline tells of those it makes.

// WorkFits refuses a room whose lab and switches together leave no
// payment a chance, where a payment's work must end within
// gatewayTimeout: in the modes that pause between the check and the
// insert, the pause, the delay switch and the gateway's latency all run
// within one request's work time-out, and past it every payment would end
// in a 500 (and a log line).
func (r *State) WorkFits(gatewayTimeout time.Duration) error {
	switch r.Lab.Server.Mode {
	case LabCheckThenInsert, LabCheckThenInsertConstrained, LabMemoryLock:
	default:
		return nil
	}
	gap, delay, latency := r.Lab.Server.CheckGapMS, r.Faults.Server.DelayMS, r.Faults.Gateway.LatencyMS
	if need := time.Duration(gap+delay+latency) * time.Millisecond; need >= gatewayTimeout {
		return pay.Errorf(pay.EINVALID, "These settings cannot work together: in the lab's %s mode the pause between check and insert (check_gap_ms %d), the delay switch (delay_ms %d) and the gateway's latency (latency_ms %d) add up to %v, and a payment's work must end within %v. Lower one of them.",
			r.Lab.Server.Mode, gap, delay, latency, need, gatewayTimeout)
	}
	return nil
}

// FaultChanges lists, in words, what differs between the switches old
// and new, for the timeline.
func FaultChanges(old, new pay.Faults) []string {
	var out []string
	onOff := func(b bool) string {
		if b {
			return "on"
		}
		return "off"
	}
	flag := func(name string, was, is bool) {
		if was != is {
			out = append(out, name+" "+onOff(is))
		}
	}
	ms := func(name string, was, is int) {
		if was != is {
			out = append(out, fmt.Sprintf("%s %d → %d ms", name, was, is))
		}
	}
	ms("server.delay_ms", old.Server.DelayMS, new.Server.DelayMS)
	for _, sw := range pay.FaultSwitches {
		if !sw.Gateway {
			flag(sw.Field, old.IsOn(sw), new.IsOn(sw))
		}
	}
	ms("gateway.latency_ms", old.Gateway.LatencyMS, new.Gateway.LatencyMS)
	for _, sw := range pay.FaultSwitches {
		if sw.Gateway {
			flag(sw.Field, old.IsOn(sw), new.IsOn(sw))
		}
	}
	if old.Random != new.Random {
		if new.Random.Enabled {
			out = append(out, fmt.Sprintf("random mode on (seed %d, probability %g)", new.Random.Seed, new.Random.Probability))
		} else {
			out = append(out, "random mode off")
		}
	}
	return out
}

// LabChanges lists, in words, what differs between the lab's settings
// old and next, for the timeline.
func LabChanges(old, next LabSettings) []string {
	var out []string
	onOff := func(b bool) string {
		if b {
			return "on"
		}
		return "off"
	}
	if old.Server.Mode != next.Server.Mode {
		out = append(out, fmt.Sprintf("server.mode %s → %s", old.Server.Mode, next.Server.Mode))
	}
	if old.Server.CheckGapMS != next.Server.CheckGapMS {
		out = append(out, fmt.Sprintf("server.check_gap_ms %d → %d ms", old.Server.CheckGapMS, next.Server.CheckGapMS))
	}
	if old.Server.RetentionSeconds != next.Server.RetentionSeconds {
		out = append(out, fmt.Sprintf("server.retention_seconds %d → %d", old.Server.RetentionSeconds, next.Server.RetentionSeconds))
	}
	// 0 servers reads as 1: only a change in how many run is one.
	if was, is := max(old.Server.Servers, 1), max(next.Server.Servers, 1); was != is {
		out = append(out, fmt.Sprintf("server.servers %d → %d", was, is))
	}
	flag := func(name string, was, is bool) {
		if was != is {
			out = append(out, name+" "+onOff(is))
		}
	}
	flag("client.new_key_per_retry", old.Client.NewKeyPerRetry, next.Client.NewKeyPerRetry)
	flag("client.retry_every_4xx", old.Client.RetryEvery4xx, next.Client.RetryEvery4xx)
	flag("client.new_key_after_500", old.Client.NewKeyAfter500, next.Client.NewKeyAfter500)
	flag("client.personal_data_key", old.Client.PersonalDataKey, next.Client.PersonalDataKey)
	return out
}

package check

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Record is one line of a history: a request as it happened, or a count
// of an action's effects taken from the oracle.
type Record struct {
	// Kind is "request" or "count".
	Kind string `json:"kind"`
	// Case is the number of the case that sent it.
	Case int `json:"case,omitempty"`
	// Group ties together the records that touch the same keys and
	// actions; the history is checked group by group.
	Group string `json:"group"`
	// Action is what one payment is for (the {{id}} of the body): every
	// request for it together may have at most one effect.
	Action string `json:"action"`
	// Caller names who sent it: "main" or "other" (-other-auth).
	Caller string `json:"caller,omitempty"`
	// Key is the idempotency key as the server should read it ("" when
	// the request had none).
	Key    string `json:"key,omitempty"`
	Method string `json:"method,omitempty"`
	URL    string `json:"url,omitempty"`
	Body   string `json:"body,omitempty"`
	// Fingerprint identifies the request's method, URL and body: a key
	// may be replayed only to the same fingerprint.
	Fingerprint string    `json:"fingerprint,omitempty"`
	Start       time.Time `json:"start"`
	End         time.Time `json:"end"`
	// Status and Response are the answer; NoAnswer says there was none
	// (the connection was dropped, or timed out), and Error why.
	Status   int    `json:"status,omitempty"`
	Response string `json:"response,omitempty"`
	NoAnswer bool   `json:"no_answer,omitempty"`
	Error    string `json:"error,omitempty"`
	// BodySHA256 is the hash of the answer's whole body, BodyBytes its
	// length; Response keeps only its start. ContentType and Replayed
	// (the replay marker, "Name: value") are the answer's headers a case
	// reads. Limit names the bound the answer went past ("headers",
	// "body"): it is then not compared.
	BodySHA256  string `json:"body_sha256,omitempty"`
	BodyBytes   int64  `json:"body_bytes,omitempty"`
	ContentType string `json:"content_type,omitempty"`
	Replayed    string `json:"replayed,omitempty"`
	Limit       string `json:"limit,omitempty"`
	// Count is the number of effects the oracle listed, on a count.
	Count int `json:"count,omitempty"`
}

// Record kinds.
const (
	KindRequest = "request"
	KindCount   = "count"
)

func fingerprint(method, url, body string) string {
	sum := sha256.Sum256([]byte(method + " " + url + "\n" + body))
	return hex.EncodeToString(sum[:8])
}

// answerOf is an answer's identity for the model: its status and the
// hash of its whole body (of the kept bytes, for a history written
// before the hash was recorded).
func answerOf(r Record) string {
	h := r.BodySHA256
	if h == "" {
		sum := sha256.Sum256([]byte(r.Response))
		h = hex.EncodeToString(sum[:])
	}
	return fmt.Sprintf("%d:%s", r.Status, short(h, 16))
}

// WriteHistory writes records as JSON Lines.
func WriteHistory(w io.Writer, records []Record) error {
	enc := json.NewEncoder(w)
	for _, r := range records {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return nil
}

// ReadHistory reads a history: JSON Lines of Records, or paytwice's
// timeline export (GET /api/timeline.json), which it converts.
func ReadHistory(r io.Reader) ([]Record, error) {
	data, err := io.ReadAll(io.LimitReader(r, 256<<20))
	if err != nil {
		return nil, err
	}
	trimmed := strings.TrimSpace(string(data))
	var probe struct {
		Events json.RawMessage `json:"events"`
	}
	if json.Unmarshal([]byte(trimmed), &probe) == nil && probe.Events != nil {
		return fromTimeline([]byte(trimmed))
	}
	var out []Record
	for n, line := range strings.Split(trimmed, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		var rec Record
		dec := json.NewDecoder(strings.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&rec); err != nil {
			return nil, fmt.Errorf("line %d: not a history record: %v", n+1, err)
		}
		if rec.Kind != KindRequest && rec.Kind != KindCount {
			return nil, fmt.Errorf("line %d: kind must be %q or %q, not %q", n+1, KindRequest, KindCount, rec.Kind)
		}
		out = append(out, rec)
	}
	if len(out) == 0 {
		return nil, errors.New("the history is empty")
	}
	return out, nil
}

// timelineEvent is the part of one event of paytwice's timeline export
// that a history needs.
type timelineEvent struct {
	Seq         uint64    `json:"seq"`
	Time        time.Time `json:"time"`
	Kind        string    `json:"kind"`
	Request     string    `json:"request"`
	Scope       string    `json:"scope"`
	Key         string    `json:"key"`
	OrderID     string    `json:"order_id"`
	Status      int       `json:"status"`
	Fingerprint string    `json:"fingerprint"`
	Charge      string    `json:"charge_id"`
}

// fromTimeline turns paytwice's timeline export into a history: one
// request per request id, from its first event to its last, answered
// with the status of its last event and the charge it named; each
// "charged" event is an effect of its key. The action is the caller and
// key, so a key charged twice is a violation, and a count per key at the
// end of the export pins the number of charges.
func fromTimeline(data []byte) ([]Record, error) {
	var exp struct {
		Events []timelineEvent `json:"events"`
	}
	if err := json.Unmarshal(data, &exp); err != nil {
		return nil, fmt.Errorf("not a timeline export: %v", err)
	}
	type req struct {
		rec     Record
		charge  string
		charged bool
		lost    bool
	}
	reqs := map[string]*req{}
	var order []string
	charges := map[string]map[string]bool{} // action → charge ids
	var last time.Time
	for _, e := range exp.Events {
		if e.Time.After(last) {
			last = e.Time
		}
		if e.Request == "" {
			continue
		}
		r, ok := reqs[e.Request]
		if !ok {
			r = &req{rec: Record{Kind: KindRequest, Start: e.Time, Method: "POST", Caller: e.Scope}}
			reqs[e.Request] = r
			order = append(order, e.Request)
		}
		r.rec.End = e.Time
		if e.Key != "" {
			r.rec.Key = e.Key
		}
		if e.Scope != "" {
			r.rec.Caller = e.Scope
		}
		if e.Fingerprint != "" {
			r.rec.Fingerprint = e.Fingerprint
		}
		if e.Status != 0 {
			r.rec.Status = e.Status
		}
		if e.Charge != "" {
			r.charge = e.Charge
		}
		switch e.Kind {
		case "charged":
			r.charged = true
			a := e.Scope + " " + r.rec.Key
			if charges[a] == nil {
				charges[a] = map[string]bool{}
			}
			charges[a][e.Charge] = true
		case "response_lost", "dropped", "crashed":
			r.lost = true
		}
	}
	// A replay names no charge: it answers with its key's saved one, the
	// first charge recorded under the key.
	firstCharge := map[string]string{}
	for _, id := range order {
		if r := reqs[id]; r.charged {
			k := r.rec.Caller + " " + r.rec.Key
			if _, ok := firstCharge[k]; !ok {
				firstCharge[k] = r.charge
			}
		}
	}
	var out []Record
	for _, id := range order {
		r := reqs[id]
		if r.rec.Key == "" {
			continue // not a payment with a key: nothing to check
		}
		if !r.charged {
			r.charge = firstCharge[r.rec.Caller+" "+r.rec.Key]
		}
		r.rec.Action = r.rec.Caller + " " + r.rec.Key
		r.rec.Group = r.rec.Action
		if r.rec.Fingerprint == "" {
			r.rec.Fingerprint = "unknown"
		}
		if r.lost || r.rec.Status == 0 {
			r.rec.NoAnswer, r.rec.Status = true, 0
		} else if r.rec.Status >= 200 && r.rec.Status < 300 {
			r.rec.Response = "charge " + r.charge
		}
		out = append(out, r.rec)
	}
	for _, a := range slices.Sorted(maps.Keys(charges)) {
		t := last.Add(time.Millisecond)
		out = append(out, Record{Kind: KindCount, Group: a, Action: a, Start: t, End: t, Count: len(charges[a])})
	}
	if len(out) == 0 {
		return nil, errors.New("the timeline export holds no payment with a key")
	}
	return out, nil
}

// The model of idempotent payments, for Porcupine.

// modelInput is an operation: a request, or a count of one action's
// effects.
type modelInput struct {
	count       bool
	action      string
	caller, key string
	fingerprint string
	describe    string
}

// modelOutput is what came back.
type modelOutput struct {
	unknown bool   // no answer, or a 5xx: the request may or may not have run
	status  int    // 0 when unknown
	answer  string // status and body hash
	count   int
}

// saved is what the server keeps for one (caller, key).
type saved struct {
	fingerprint string
	answer      string // "" while unknown: the first answer seen fixes it
}

// modelState is the state of one group: the saved answers and every
// action's effects. It is copied on every step (Porcupine's models are
// pure).
type modelState struct {
	keys    map[string]saved
	effects map[string]int
}

func (s modelState) clone() modelState {
	return modelState{keys: maps.Clone(s.keys), effects: maps.Clone(s.effects)}
}

func (s modelState) String() string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(s.keys)) {
		a := s.keys[k].answer
		if a == "" {
			a = "?"
		}
		parts = append(parts, fmt.Sprintf("%s → %s", k, a))
	}
	for _, a := range slices.Sorted(maps.Keys(s.effects)) {
		parts = append(parts, fmt.Sprintf("%s: %d effect(s)", a, s.effects[a]))
	}
	return strings.Join(parts, "; ")
}

func (s modelState) equal(o modelState) bool {
	return maps.Equal(s.keys, o.keys) && maps.Equal(s.effects, o.effects)
}

// step lists the states the model may be in after op, none if op could
// not have happened.
func step(st modelState, in modelInput, out modelOutput) []modelState {
	if in.count {
		if st.effects[in.action] == out.count {
			return []modelState{st}
		}
		return nil
	}
	id := in.caller + "\x00" + in.key
	held, present := st.keys[id]
	if in.key == "" {
		// No key: nothing to replay. A success is a payment of its own.
		if out.unknown {
			n := st.clone()
			n.effects[in.action]++
			return []modelState{st, n}
		}
		if out.status >= 200 && out.status < 300 {
			n := st.clone()
			n.effects[in.action]++
			return []modelState{n}
		}
		return []modelState{st}
	}
	switch {
	case out.unknown:
		// It ran or it did not. If it ran, its answer is saved (unknown
		// to us, fixed by the first replay seen) and it may have charged.
		if present {
			return []modelState{st}
		}
		ran := st.clone()
		ran.keys[id] = saved{fingerprint: in.fingerprint}
		ran.effects[in.action]++
		return []modelState{st, ran}
	case out.status >= 200 && out.status < 300:
		if !present {
			// A fresh execution: one effect, and an answer nobody else has.
			for _, other := range st.keys {
				if other.answer == out.answer {
					return nil // another key's (or caller's) answer replayed
				}
			}
			n := st.clone()
			n.keys[id] = saved{fingerprint: in.fingerprint, answer: out.answer}
			n.effects[in.action]++
			return []modelState{n}
		}
		if held.fingerprint != in.fingerprint {
			return nil // a success for another request on a used key
		}
		if held.answer == "" {
			for _, other := range st.keys {
				if other.answer == out.answer {
					return nil
				}
			}
			n := st.clone()
			n.keys[id] = saved{fingerprint: in.fingerprint, answer: out.answer}
			return []modelState{n}
		}
		if held.answer != out.answer {
			return nil // a replay that is not the saved answer
		}
		return []modelState{st}
	default:
		// A refusal (400, 409, 422, 429…) or a saved failure (402): no
		// effect, nothing a later answer must repeat.
		return []modelState{st}
	}
}

// model is Porcupine's model of idempotent payments, partitioned by group.
func model() porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Init: func() []any { return []any{modelState{keys: map[string]saved{}, effects: map[string]int{}}} },
		Step: func(state, input, output any) []any {
			next := step(state.(modelState), input.(modelInput), output.(modelOutput))
			out := make([]any, len(next))
			for i, s := range next {
				out[i] = s
			}
			return out
		},
		Equal: func(a, b any) bool { return a.(modelState).equal(b.(modelState)) },
		DescribeOperation: func(input, output any) string {
			in, out := input.(modelInput), output.(modelOutput)
			switch {
			case in.count:
				return fmt.Sprintf("count %s → %d", in.action, out.count)
			case out.unknown && out.status == 0:
				return in.describe + " → no answer"
			case out.unknown:
				return fmt.Sprintf("%s → %d (outcome unknown)", in.describe, out.status)
			}
			return in.describe + " → " + out.answer
		},
		DescribeState: func(state any) string { return state.(modelState).String() },
	}
	m := nm.ToModel()
	m.Partition = func(history []porcupine.Operation) [][]porcupine.Operation {
		groups := map[string][]porcupine.Operation{}
		var names []string
		for _, op := range history {
			g := op.Metadata.(string)
			if _, ok := groups[g]; !ok {
				names = append(names, g)
			}
			groups[g] = append(groups[g], op)
		}
		out := make([][]porcupine.Operation, 0, len(names))
		for _, n := range names {
			out = append(out, groups[n])
		}
		return out
	}
	m.DescribeOperationMetadata = func(info any) string { return "group " + info.(string) }
	return m
}

// operations turns records into Porcupine's operations: times in
// nanoseconds since the first record, an operation with no answer open
// until the end of time (it may still take effect).
func operations(records []Record) []porcupine.Operation {
	if len(records) == 0 {
		return nil
	}
	t0 := records[0].Start
	for _, r := range records {
		if r.Start.Before(t0) {
			t0 = r.Start
		}
	}
	clients := map[string]int{}
	ops := make([]porcupine.Operation, 0, len(records))
	for i, r := range records {
		if r.Kind == KindRequest && !r.NoAnswer && r.Status < 500 && (r.Status < 200 || r.Status > 299) {
			// A refusal changes nothing and may come at any time: leaving
			// it out changes no verdict, and spares the search every
			// order of a storm's many 409s.
			continue
		}
		client, ok := clients[r.Group+"\x00"+r.Caller+"\x00"+fmt.Sprint(i)]
		if !ok {
			client = len(clients)
			clients[r.Group+"\x00"+r.Caller+"\x00"+fmt.Sprint(i)] = client
		}
		in := modelInput{action: r.Action, caller: r.Caller, key: r.Key, fingerprint: r.Fingerprint}
		var out modelOutput
		if r.Kind == KindCount {
			in.count, out.count = true, r.Count
		} else {
			in.describe = fmt.Sprintf("%s key %q %s", r.Caller, short(r.Key, 24), short(r.Body, 60))
			switch {
			case r.NoAnswer:
				out.unknown = true
			case r.Status >= 500:
				out.unknown, out.status = true, r.Status
			default:
				out.status, out.answer = r.Status, answerOf(r)
			}
		}
		end := r.End.Sub(t0).Nanoseconds()
		if out.unknown {
			end = math.MaxInt64 / 2
		}
		ops = append(ops, porcupine.Operation{ClientId: client, Input: in, Output: out,
			Call: r.Start.Sub(t0).Nanoseconds(), Return: end, Metadata: r.Group})
	}
	return ops
}

func short(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Linearizability is the history check's result.
type Linearizability struct {
	// Operations is how many operations were checked.
	Operations int `json:"operations"`
	// Result is "ok", "violation" or "unknown" (the check ran out of time).
	Result string `json:"result"`
	// Groups names the groups with no legal order.
	Groups []string `json:"violating_groups,omitempty"`
	// Seconds is how long the check took; Timeout its bound.
	Seconds float64 `json:"seconds"`
	Timeout float64 `json:"timeout_seconds"`
	// Visualization is the HTML file written for a violation, if any.
	Visualization string `json:"visualization,omitempty"`
}

// CheckHistory checks records for linearizability against the model of
// idempotent payments. With htmlPath set, a violation is drawn there by
// Porcupine's visualization.
//
// The whole check, naming the groups and drawing included, stops at
// timeout: the result is then "unknown", not decided.
func CheckHistory(records []Record, timeout time.Duration, htmlPath string) (lin Linearizability, err error) {
	start := time.Now()
	deadline := start.Add(timeout)
	left := func() time.Duration { return max(time.Until(deadline), time.Millisecond) }
	ops := operations(records)
	m := model()
	res, info := porcupine.CheckOperationsVerbose(m, ops, timeout)
	lin = Linearizability{Operations: len(records), Timeout: timeout.Seconds()}
	defer func() { lin.Seconds = time.Since(start).Seconds() }()
	switch res {
	case porcupine.Ok:
		lin.Result = "ok"
	case porcupine.Unknown:
		lin.Result = "unknown"
	default:
		lin.Result = "violation"
		// Each group alone, to name the ones that fail.
		for _, part := range m.Partition(ops) {
			if porcupine.CheckOperationsTimeout(m, part, left()) == porcupine.Illegal {
				lin.Groups = append(lin.Groups, part[0].Metadata.(string))
			}
		}
		if htmlPath != "" {
			// Only the offending operations, one row each: the view is for
			// finding the violation, not for reading the whole run.
			var bad []porcupine.Operation
			for _, op := range ops {
				if slices.Contains(lin.Groups, op.Metadata.(string)) {
					op.ClientId = len(bad)
					bad = append(bad, op)
				}
			}
			if len(bad) > 0 {
				_, info = porcupine.CheckOperationsVerbose(m, bad, left())
			}
			f, err := os.Create(htmlPath)
			if err != nil {
				return lin, err
			}
			err = porcupine.Visualize(m, info, f)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return lin, err
			}
			lin.Visualization = htmlPath
		}
	}
	return lin, nil
}

// VisualizationPath is where a violation of the history at path is drawn:
// next to it, with ".html" for its extension.
func VisualizationPath(path string) string {
	base := strings.TrimSuffix(path, ".jsonl")
	base = strings.TrimSuffix(base, ".json")
	return base + ".html"
}

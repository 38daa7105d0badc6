package pay

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"
)

// This file is the data path of one payment, top to bottom: replay from
// memory, claim, work outside any transaction, save the charge and the
// answer together. Pay returns what happened as an Outcome; the HTTP
// adapter (web/payments.go) turns it into a response and never decides a
// rule itself.
//
// What is saved and replayed, the rule in one place: once the work has
// started, every definite answer is saved on the key with its charge, if
// any, and replayed byte for byte: the 201, a gateway's refusal (402) or
// failure (502), a server error after the charge (500), and the 422 for a
// key the gateway already knew for another order. Nothing is saved for a
// request refused before its claim (400, 409, 422), for one released
// before any side effect (503), or when the outcome is unknown (504, a
// crash midway, a transaction that rolled back after the charge): then
// the key stays started, and only the sweeper, asking the gateway, closes
// it.

// Service runs the payment protocol.
type Service struct {
	Store   Storage
	Gateway Gateway
	// Now is the clock charges are stamped with and the sweeper ages keys
	// by; nil means time.Now.
	Now func() time.Time
	// Sleep waits out the delay fault; nil means a timer. Tests replace it.
	Sleep func(ctx context.Context, d time.Duration) error
	// WorkContext gives the context a claimed payment's work runs under.
	// The work belongs to the server, not to the caller's connection: a
	// client that hangs up must not leave it half done, so it should not
	// end with the caller's context; it should be bounded (the gateway
	// time-out, shorter than the lock timeout) and end at shutdown. Pay
	// makes it just before the claim, which records its deadline
	// (ClaimRequest.WorkFor). nil means the caller's context without its
	// cancellation.
	WorkContext func() (context.Context, context.CancelFunc)

	// ClaimWait bounds how long a claim may wait for the store (a paused
	// or overloaded database); 0 means MaxClaimWait.
	ClaimWait time.Duration

	running runningClaims
	// working lists the keys at work here, so that a repeat is answered
	// without the store (working.go).
	working workingKeys
}

// Payment is one request to pay, parsed by the caller.
type Payment struct {
	Scope, Key   string
	Method, Path string
	Request      PaymentRequest
	// ChargeKey files the charge, and calls the gateway, under a key other
	// than Key; "" means Key. Only the lab's key-table-only mode sets it.
	ChargeKey string
	// Faults are what the simulated world does to this request; the zero
	// value is a healthy server.
	Faults ServerFaults
	// Gateway, when set, is used instead of the service's for this
	// payment (the switches a request drew).
	Gateway Gateway
	// Render turns an error that is saved on the key into the status and
	// body a replay sends, as the caller's protocol writes them.
	Render func(error) (status int, body []byte)
	// Observe, when set, is told every step, in order, on the payment's
	// own goroutine: it may block to hold the payment at that step, and
	// should then pause the work (PauseWork, RenewWork).
	Observe func(Step)
	// Stopped, when set, is asked right before the gateway call: true
	// means the server is stopping and nobody let this payment go on (it
	// was held in step mode), so it must not charge. The claim is
	// released, nothing left the building, and a retry runs afresh.
	Stopped func() bool
	// KnownFingerprint is Fingerprint's answer when the caller has
	// computed it already from the same method, path and request; ""
	// has Fingerprint compute it (once).
	KnownFingerprint string

	work claimedWork // set once the key is claimed (work.go)
	// listed says the key is on the service's list of keys at work here
	// (working.go).
	listed bool
}

// Fingerprint is the payment's fingerprint. It is computed once: a
// payment needs it several times, and each time would encode the request
// and hash it again.
func (p *Payment) Fingerprint() string {
	if p.KnownFingerprint == "" {
		p.KnownFingerprint = Fingerprint(p.Method, p.Path, p.Request.Canonical())
	}
	return p.KnownFingerprint
}

func (p *Payment) claimRequest() ClaimRequest {
	return ClaimRequest{Scope: p.Scope, Key: p.Key, Method: p.Method, Path: p.Path, Fingerprint: p.Fingerprint(),
		OrderID: p.Request.OrderID, AmountSatang: p.Request.AmountSatang, ChargeKey: p.ChargeKey}
}

func (p *Payment) observe(kind StepKind, status int, detail string) {
	p.observeStep(Step{Kind: kind, Status: status, Detail: detail})
}

// observeFault reports a step that a fault switch caused.
func (p *Payment) observeFault(kind StepKind, status int, detail string) {
	p.observeStep(Step{Kind: kind, Status: status, Detail: detail, Fault: true})
}

func (p *Payment) observeStep(st Step) {
	if p.Observe != nil {
		p.Observe(st)
	}
}

// OutcomeKind says how a payment request ended.
type OutcomeKind int

// The ways a payment ends.
const (
	// Saved: the request ran and its answer is saved on the key (201, or a
	// saved failure: 402, 500, 502, or a 422 for a key the gateway knew
	// for another order).
	Saved OutcomeKind = iota + 1
	// Replayed: the key is done; its saved answer is sent again.
	Replayed
	// InProgress: the key's first request is still running (409).
	InProgress
	// Mismatch: the key belongs to another request (422); nothing run.
	Mismatch
	// Reused: the key's kept charge is for another order (422); nothing
	// run or saved.
	Reused
	// Released: interrupted before any side effect; the claim was deleted
	// and a retry runs afresh (503).
	Released
	// Unknown: the gateway did not answer; the key stays started for the
	// sweeper (504).
	Unknown
	// Crashed: the crash-midway fault stopped the request after the
	// gateway call; nothing is answered and the key stays started.
	Crashed
	// RolledBack: the transaction recording a charge the gateway made
	// rolled back; the key stays started for the sweeper (500).
	RolledBack
	// Failed: an unexpected error; nothing saved.
	Failed
)

// Outcome is how one payment request ended.
type Outcome struct {
	Kind OutcomeKind
	// Status and Body are the saved answer (Saved, Replayed).
	Status int
	Body   []byte
	// Err is the problem to answer (every other kind).
	Err error
	// Charge is the charge recorded by this request, if any.
	Charge *Charge
	// Held is the row that holds the key (InProgress), and Running says
	// whether its request is at work in this process: a caller may tell
	// a client how long a key whose request has stopped will stay held.
	Held    *KeyRow
	Running bool
}

// StepKind names a step of the protocol, for the timeline.
type StepKind string

// The steps a payment reports.
const (
	StepClaimed      StepKind = "claimed"
	StepReplayed     StepKind = "replayed"
	StepConflict     StepKind = "conflict"
	StepMismatch     StepKind = "mismatch"
	StepDelayed      StepKind = "delayed"
	StepGatewayCall  StepKind = "gateway"
	StepGatewayReply StepKind = "gateway_reply"
	StepCharged      StepKind = "charged"
	StepCompleted    StepKind = "completed"
	StepReleased     StepKind = "released"
	StepCrashed      StepKind = "crashed"
	StepRolledBack   StepKind = "rolled_back"
	StepFailed       StepKind = "failed"
)

// Step is one step of a payment, as Observe is told it.
type Step struct {
	Kind   StepKind
	Status int
	Detail string
	// ChargeID is the local charge, on StepCharged.
	ChargeID string
	// Fault marks a step that a fault switch caused.
	Fault bool
}

// GatewayKey is the key passed on to the gateway: scoped, so one caller's
// key can never match another caller's charge there either.
func GatewayKey(scope, key string) string { return scope + "|" + key }

// ErrInterrupted answers a request released before any side effect.
var ErrInterrupted = &Error{Code: EUNAVAILABLE, Message: "The request was interrupted before anything happened; retry with the same key."}

// ErrHalfway is the "fails halfway" fault's error: the transaction that
// records the outcome rolled back.
var ErrHalfway = &Error{Code: EINTERNAL, Message: "The transaction that records the charge failed halfway and was rolled back."}

// Gateway errors. The gateway returns them (or wraps them); the protocol
// reads ETIMEOUT as "outcome unknown".
var (
	ErrDeclined       = &Error{Code: EDECLINED, Message: "The payment gateway declined the card."}
	ErrGatewayFailure = &Error{Code: EGATEWAY, Message: "The payment gateway failed before charging."}
	ErrGatewayTimeout = &Error{Code: ETIMEOUT, Message: "The payment gateway did not answer in time: the charge may or may not have happened."}
)

// MaxClaimWait bounds a claim that its caller can no longer cancel (Pay).
const MaxClaimWait = 10 * time.Second

// Pay runs the protocol for one payment: a replay from memory, else the
// claim, then the work.
func (s *Service) Pay(ctx context.Context, p *Payment) Outcome {
	fp := p.Fingerprint()

	// 1. A done key's answer never changes: replay it from memory without
	// queueing behind the writer.
	// A request that does not match it goes on to the claim, which reads
	// the key's row: the 422 names what differs, and the cache keeps only
	// the answer.
	if saved, ok := s.Store.CachedResponse(p.Scope, p.Key); ok && saved.Fingerprint == fp {
		return answerExisting(p, fp, KeyRow{Status: StatusDone, ResponseStatus: saved.Status, ResponseBody: saved.Body, Fingerprint: saved.Fingerprint})
	}
	// A repeat of a request at work here: its row is started, held by
	// that request's claim, and would answer 409 (working.go).
	if s.working.running(p.Scope, p.Key, fp) {
		o := answerExisting(p, fp, KeyRow{Status: StatusStarted, Fingerprint: fp})
		o.Running = true
		return o
	}

	// The work's deadline is fixed before the claim, so that the claim
	// can record it: another server's sweeper must not close the key
	// while the work may still run (step mode pauses it, see work.go).
	var work context.Context
	cancel := context.CancelFunc(func() {})
	if s.WorkContext != nil {
		work, cancel = s.WorkContext()
		work = KeepWriteFirst(ctx, work)
	} else {
		work = context.WithoutCancel(ctx)
	}
	defer cancel()
	req := p.claimRequest()
	if deadline, ok := work.Deadline(); ok {
		req.WorkFor = max(time.Until(deadline), 0)
	}

	// 2. Claim: one INSERT that the primary key lets exactly one request
	// win. The winner's row carries a fencing token of its own.
	//
	// The claim runs to its end whatever the caller does: a claim cut off
	// when the client hangs up may have committed all the same, leaving a
	// started key that no request works on, and every retry a 409 until
	// the sweeper. Its waits are bounded by the store (the writer's
	// queue; on PostgreSQL, the claim's lock_timeout).
	//
	// The claim counts as running before it commits: a repeat that meets
	// it the moment it commits is told the truth, that it is at work.
	req.Token = NewToken()
	s.running.add(req.Token)
	defer s.running.remove(req.Token)
	wait := s.ClaimWait
	if wait <= 0 {
		wait = MaxClaimWait
	}
	claimCtx, cancelClaim := context.WithTimeout(context.WithoutCancel(ctx), wait)
	claim, err := s.Store.Claim(claimCtx, req)
	waitedOut := claimCtx.Err() != nil
	cancelClaim()
	switch {
	case err != nil && waitedOut:
		// The store did not answer in time: a database paused, or too
		// busy. Nothing was charged, and no answer is saved; the claim
		// itself may have committed at the last moment, which a retry
		// with the same key would meet as a 409 until the sweeper frees
		// the key.
		return failed(p, errors.Join(Errorf(EUNAVAILABLE, "The database did not confirm this request's claim of its key within %s; nothing was charged. Retry with the same key after Retry-After seconds.", wait), err))
	case err != nil:
		return failed(p, err)
	case claim.Reused != nil:
		p.observe(StepMismatch, 422, "this key already paid for order "+claim.Reused.OrderID+": refused")
		return Outcome{Kind: Reused, Err: KeyUsedForAnotherOrder(p.Key, *claim.Reused, p.Request)}
	case !claim.Claimed:
		ex := claim.Existing
		o := answerExisting(p, fp, ex)
		if o.Kind == InProgress {
			o.Held, o.Running = &ex, s.running.has(ex.Claim)
		}
		return o
	}
	p.work = claimedWork{s: s, ctx: work, claim: claim.Claim}
	s.working.add(p.Scope, p.Key, claim.Claim, fp)
	p.listed = true
	defer s.unlist(p, claim.Claim)
	p.observe(StepClaimed, 0, "key row inserted as started")

	// 3. The work belongs to the server from here, not to the connection.
	if claim.Claim != req.Token {
		return s.Execute(work, p, claim.Claim) // a store that made a token of its own
	}
	return s.execute(work, p, claim.Claim) // counted as running since before the claim
}

// AnswerHeld answers the payment from the row that already holds its key:
// the saved-and-replayed rule, for a caller (the lab) that found the row
// itself.
func (p *Payment) AnswerHeld(row KeyRow) Outcome {
	return answerExisting(p, p.Fingerprint(), row)
}

// answerExisting answers a request whose key is already held: 422 if the
// key belongs to another request (this wins over 409: the key is misused
// whatever the first request's state), 409 while the first is running,
// and the saved answer once it is done.
func answerExisting(p *Payment, fp string, held KeyRow) Outcome {
	status, savedStatus, savedBody := held.Status, held.ResponseStatus, held.ResponseBody
	switch {
	case held.Fingerprint != fp:
		differs := Differs(p.Method, p.Path, p.Request, held)
		p.observe(StepMismatch, 422, "same key, different request: "+differsWords(differs))
		err := Errorf(EMISMATCH, "The key %q was first used with a different request (%s); it was not run again, and the original is untouched.", Truncate(p.Key, 64), differsWords(differs))
		err.Differs = differs
		return Outcome{Kind: Mismatch, Err: err}
	case status == StatusStarted:
		p.observe(StepConflict, 409, "first request still running")
		return Outcome{Kind: InProgress, Err: Errorf(ECONFLICT, "A request with the key %q is still being processed. Retry with the same key after the Retry-After seconds.", Truncate(p.Key, 64))}
	}
	p.observe(StepReplayed, savedStatus, "saved response sent again; nothing executed")
	return Outcome{Kind: Replayed, Status: savedStatus, Body: savedBody}
}

// KeyUsedForAnotherOrder is the answer to a key whose kept charge is for
// another order: a key pays for one order, and a request is never
// answered with another order's charge.
func KeyUsedForAnotherOrder(key string, ch Charge, req PaymentRequest) error {
	err := Errorf(EMISMATCH, "The key %q was already used for order %s (%d satang) on %s, and that charge is kept. It was not charged again, and this request was not run: use a new key for a new order.",
		Truncate(key, 64), Truncate(ch.OrderID, 64), ch.AmountSatang, ch.CreatedAt.UTC().Format(time.DateOnly))
	err.Differs = Differs("", "", req, KeyRow{OrderID: ch.OrderID, AmountSatang: ch.AmountSatang})
	return err
}

// Differs names the parts of a request (method, path and body) that
// differ from the request a key first saw, its row first: "method",
// "path", "order_id", "amount_satang", in that order. An empty method or
// path on either side is not compared.
func Differs(method, path string, req PaymentRequest, first KeyRow) []string {
	var d []string
	if method != "" && first.Method != "" && method != first.Method {
		d = append(d, "method")
	}
	if path != "" && first.Path != "" && path != first.Path {
		d = append(d, "path")
	}
	if req.OrderID != first.OrderID {
		d = append(d, "order_id")
	}
	if req.AmountSatang != first.AmountSatang {
		d = append(d, "amount_satang")
	}
	return d
}

// differsWords is Differs as a 422's detail says it.
func differsWords(d []string) string {
	switch len(d) {
	case 0:
		return "the body differs"
	case 1:
		return "the " + d[0] + " differs"
	}
	return "the " + strings.Join(d[:len(d)-1], ", ") + " and " + d[len(d)-1] + " differ"
}

// Execute does a claimed payment's work under the claim's fencing token:
// the gateway call, outside any transaction, then one transaction that
// saves the charge and the answer. The claim counts as running until
// Execute returns, so the sweeper leaves its key alone.
func (s *Service) Execute(ctx context.Context, p *Payment, claim string) Outcome {
	s.running.add(claim)
	defer s.running.remove(claim)
	return s.execute(ctx, p, claim)
}

// execute is Execute for a claim that already counts as running.
func (s *Service) execute(ctx context.Context, p *Payment, claim string) Outcome {
	p.work = claimedWork{s: s, ctx: ctx, claim: claim}
	c := p.claimRequest()

	if d := p.Faults.Delay(); d > 0 {
		p.observeFault(StepDelayed, 0, "holding the key started for "+d.String())
		if err := s.sleep(ctx, d); err != nil {
			// Nothing left the building yet: a retry may run afresh.
			return s.release(ctx, p, c, claim)
		}
	}

	gw := p.Gateway
	if gw == nil {
		gw = s.Gateway
	}
	if p.ChargeKey != "" {
		p.observe(StepGatewayCall, 0, "charging the gateway with a reference of this request's own, not the key")
	} else {
		p.observe(StepGatewayCall, 0, "charging the gateway with the key")
	}
	if p.Stopped != nil && p.Stopped() {
		return s.release(ctx, p, c, claim)
	}
	g, err := gw.Charge(ctx, GatewayKey(p.Scope, c.ChargeKeyOrKey()), p.Request.OrderID, p.Request.AmountSatang)
	if p.Faults.CrashMidway {
		// Whatever the gateway answered, nobody is left to act on it: only
		// the sweeper, asking the gateway, can tell what happened.
		p.observeFault(StepCrashed, 0, "the server stopped right after the gateway call; key left started")
		return Outcome{Kind: Crashed}
	}
	switch {
	case ErrorCode(err) == ETIMEOUT:
		// The money may have moved: only the sweeper may close this key.
		p.observe(StepGatewayReply, 504, "no answer: outcome unknown, key stays started")
		return Outcome{Kind: Unknown, Err: err}
	case err != nil:
		// A definite answer from the gateway: saved, so retries replay it.
		status, _ := p.Render(err)
		p.observe(StepGatewayReply, status, ErrorMessage(err))
		return s.save(ctx, p, c, claim, err, nil)
	}
	p.observe(StepGatewayReply, 200, "charged "+g.ID)

	// The local charge records what the gateway took, so the two agree.
	local := &Charge{ID: NewID("ch_"), Scope: p.Scope, Key: c.ChargeKeyOrKey(), OrderID: g.OrderID,
		AmountSatang: g.AmountSatang, GatewayRef: g.ID, CreatedAt: s.now()}
	var answer error
	switch {
	case g.OrderID != p.Request.OrderID || g.AmountSatang != p.Request.AmountSatang:
		// The gateway already held a charge for this key, for another
		// order: record it (it is money taken) and refuse.
		answer = KeyUsedForAnotherOrder(p.Key, Charge{OrderID: g.OrderID, AmountSatang: g.AmountSatang, CreatedAt: g.CreatedAt}, p.Request)
	case p.Faults.ServerError:
		answer = Errorf(EINTERNAL, "The server failed after the payment started. The charge may have happened: look it up with GET /v1/payments?order_id=%s before paying again, and do not switch to a new key.", p.Request.OrderID)
	}
	return s.save(ctx, p, c, claim, answer, local)
}

// save stores the answer on the key, with the charge if there is one, in
// one transaction. answer nil means the 201 for the charge.
func (s *Service) save(ctx context.Context, p *Payment, c ClaimRequest, claim string, answer error, charge *Charge) Outcome {
	status, body := PaidStatus, []byte(nil)
	if answer != nil {
		status, body = p.Render(answer)
	} else {
		body = charge.ResponseBody()
	}
	done := Completion{ClaimRequest: c, Claim: claim, Status: status, Body: body, Charge: charge}
	if p.Faults.FailHalfway {
		done.BeforeCommit = func() error { return ErrHalfway }
	}
	s.unlist(p, claim) // the row may change from here
	// The gateway has answered: what it did must be recorded, however
	// long the save waits for the writer. A save given up at the work's
	// deadline left a charged key started and the gateway one charge
	// ahead until the sweeper; a save that comes late is safe, as it acts
	// only through its claim's token and records a charge the sweeper may
	// already have recorded once.
	saved, err := s.Store.Complete(context.WithoutCancel(ctx), done)
	switch {
	case errors.Is(err, ErrHalfway) && charge == nil:
		// The gateway said no: nothing happened outside, so the claim goes.
		p.observeFault(StepRolledBack, 500, "the transaction saving the gateway's refusal rolled back; nothing was charged")
		return s.release(ctx, p, c, claim)
	case errors.Is(err, ErrHalfway):
		p.observeFault(StepRolledBack, 500, "the charge's transaction rolled back after the gateway charged; key stays started for the sweeper")
		return Outcome{Kind: RolledBack, Err: err}
	case err != nil:
		return failed(p, err)
	}
	switch {
	case saved.ClaimLost:
		p.observe(StepCompleted, saved.Status, "the key was closed while this request worked; its charge is recorded all the same, nothing charged twice")
	case charge != nil && saved.ChargeExisted && saved.Status == PaidStatus:
		p.observe(StepCompleted, saved.Status, "this key's charge was already recorded (its key row had been pruned): nothing charged twice, the original charge is answered")
	case charge != nil && saved.ChargeExisted:
		p.observe(StepCompleted, saved.Status, "this key's charge was already recorded (its key row had been pruned): nothing charged twice; this request's own answer is saved on the key")
	default:
		if charge != nil {
			p.observeStep(Step{Kind: StepCharged, ChargeID: charge.ID, Detail: "charge " + charge.ID + " recorded"})
		}
		p.observe(StepCompleted, saved.Status, "response saved on the key")
	}
	switch {
	case saved.ChargeExisted && saved.Status == PaidStatus:
		// The answer is the key's earlier charge, not this request's work:
		// a replay, though its key row had to be written again.
		return Outcome{Kind: Replayed, Status: saved.Status, Body: saved.Body}
	case saved.ChargeExisted:
		// This request's own answer (a server error after the gateway
		// call), saved: not a replay, and no charge of its own.
		return Outcome{Kind: Saved, Status: saved.Status, Body: saved.Body}
	}
	return Outcome{Kind: Saved, Status: saved.Status, Body: saved.Body, Charge: charge}
}

// release deletes the claim after a failure that happened before any
// external side effect, so a retry runs afresh.
func (s *Service) release(ctx context.Context, p *Payment, c ClaimRequest, claim string) Outcome {
	s.unlist(p, claim) // the row may change from here
	if _, err := s.Store.Release(context.WithoutCancel(ctx), c.Scope, c.Key, claim, ReleasedBeforeWork); err != nil {
		return failed(p, err)
	}
	p.observe(StepReleased, 503, "claim released before any side effect: a retry runs afresh")
	return Outcome{Kind: Released, Err: ErrInterrupted}
}

func failed(p *Payment, err error) Outcome {
	p.observe(StepFailed, 0, ErrorMessage(err))
	return Outcome{Kind: Failed, Err: err}
}

// SweepOutcome is what the sweeper did with one stuck key.
type SweepOutcome struct {
	Row     KeyRow
	Charged bool   // the gateway had charged: the key is now done with a 201
	Charge  Charge // the charge recorded, when Charged
	Err     error  // the key could not be closed this time; it stays started
}

// Sweep closes the keys started before now-olderThan whose request is not
// running in this process. For each it asks the gateway: charged → it
// records the charge and marks the key done with the 201 a live request
// would have sent; not charged → it releases the key so a retry runs
// afresh. It acts only on the claim it read: a request that finished in
// between is left alone and not reported.
func (s *Service) Sweep(ctx context.Context, olderThan time.Duration) ([]SweepOutcome, error) {
	stuck, err := s.Store.StartedBefore(ctx, s.now().Add(-olderThan))
	if err != nil {
		return nil, err
	}
	return s.SweepRows(ctx, stuck)
}

// SweepRows closes the given started keys as Sweep does, each through the
// claim it was found with: found earlier (at start-up, before this
// process took a request), a key whose claim has changed since is left
// to its new holder.
func (s *Service) SweepRows(ctx context.Context, stuck []KeyRow) ([]SweepOutcome, error) {
	var out []SweepOutcome
	for _, row := range stuck {
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
		if s.running.has(row.Claim) {
			continue // its request will save its own outcome
		}
		o := SweepOutcome{Row: row}
		g, charged, err := s.Gateway.Lookup(ctx, GatewayKey(row.Scope, row.ChargeKeyOrKey()))
		switch {
		case err != nil:
			o.Err = err
		case charged:
			o.Charged = true
			o.Charge = Charge{ID: NewID("ch_"), Scope: row.Scope, Key: row.ChargeKeyOrKey(), OrderID: g.OrderID,
				AmountSatang: g.AmountSatang, GatewayRef: g.ID, CreatedAt: s.now()}
			var done Completed
			done, o.Err = s.Store.Complete(ctx, Completion{ClaimRequest: ClaimRequestOf(row), Claim: row.Claim,
				Status: PaidStatus, Body: o.Charge.ResponseBody(), Charge: &o.Charge})
			if o.Err == nil && done.ClaimLost {
				continue // the request itself finished meanwhile
			}
		default:
			var released bool
			released, o.Err = s.Store.Release(ctx, row.Scope, row.Key, row.Claim, ReleasedBySweeper)
			if o.Err == nil && !released {
				continue // the request itself finished meanwhile
			}
		}
		out = append(out, o)
	}
	return out, nil
}

// Running reports whether a claim's request is at work in this process.
func (s *Service) Running(claim string) bool { return s.running.has(claim) }

func (s *Service) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (s *Service) sleep(ctx context.Context, d time.Duration) error {
	if s.Sleep != nil {
		return s.Sleep(ctx, d)
	}
	return Sleep(ctx, d)
}

// Sleep waits for d, or returns ctx's error if ctx ends first.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// runningClaims are the claims whose request is at work in this process.
// The sweeper never closes their keys, whatever a warped clock says. A
// claim is counted as often as it was added, so a claim held by Pay and
// by Execute leaves when both are done.
type runningClaims struct {
	mu     sync.Mutex
	claims map[string]int
}

func (r *runningClaims) add(claim string) {
	r.mu.Lock()
	if r.claims == nil {
		r.claims = map[string]int{}
	}
	r.claims[claim]++
	r.mu.Unlock()
}

func (r *runningClaims) remove(claim string) {
	r.mu.Lock()
	if r.claims[claim]--; r.claims[claim] <= 0 {
		delete(r.claims, claim)
	}
	r.mu.Unlock()
}

func (r *runningClaims) has(claim string) bool {
	r.mu.Lock()
	_, ok := r.claims[claim]
	r.mu.Unlock()
	return ok
}

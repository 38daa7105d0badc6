package room

import (
	"paytwice/pay"
)

// Poll is the class's prediction of one lesson question, as the room
// holds it: the presenter opens it, every phone answers once (and may
// change its answer) until the presenter closes it, the board shows only
// how many answered until the presenter reveals the split, and the
// server's own outcome grades it. It is room state, so every server of
// the class shows the same vote and a restarted server finds it again.
//
// Ballots are anonymous: a ballot is keyed by a hash of the browser's
// session and remembers only a hash of the address it came from, so that
// one address cannot fill the ballot box.
type Poll struct {
	// ID counts the polls opened in the room: a phone's answer names the
	// poll it answers, so an answer to a poll already replaced is refused.
	ID uint64 `json:"id"`
	// Lesson and Runs are the chapter and its run (State.LessonRuns) the
	// question belongs to; Question is its index in the chapter's Ask.
	Lesson   string `json:"lesson"`
	Runs     uint64 `json:"runs"`
	Question int    `json:"question"`
	// Request is, for step mode's question (lesson.StepQuestion), the
	// held request it asks about, At the checkpoint it was held at, and
	// Subject the order and click the board names it by; all "" for a
	// chapter's question.
	Request string `json:"request,omitempty"`
	At      string `json:"at,omitempty"`
	Subject string `json:"subject,omitempty"`
	// Choices is how many choices the question has.
	Choices int       `json:"choices"`
	Phase   PollPhase `json:"phase"`
	// Ballots are the answers: session hash → ballot.
	Ballots map[string]Ballot `json:"ballots,omitempty"`
	// Outcome is what the server did, once it has shown it; nil until
	// then: the board then says it does not know yet.
	Outcome *PollOutcome `json:"outcome,omitempty"`
}

// PollPhase is where a poll is: open to answers, closed, or revealed.
type PollPhase string

const (
	PollOpen     PollPhase = "open"
	PollClosed   PollPhase = "closed"
	PollRevealed PollPhase = "revealed"
)

// Ballot is one phone's answer.
type Ballot struct {
	Choice int `json:"choice"`
	// From is a hash of the address the answer came from.
	From string `json:"from"`
}

// PollOutcome is the server's answer to the question: the choice its
// events showed, the timeline row that showed it, and what it did, in
// the server's words (the answer's status, a replay, the order's
// charges).
type PollOutcome struct {
	Choice int    `json:"choice"`
	Row    string `json:"row,omitempty"`
	Said   string `json:"said"`
}

// PollLimits bound the ballot box. One address may be a whole school
// behind one NAT, so its share is a class, not a phone.
type PollLimits struct {
	// Ballots is how many ballots one poll holds in all.
	Ballots int
	// PerAddress is how many of them may come from one address.
	PerAddress int
}

// DefaultPollLimits hold a large class, from one address if need be, and
// keep the room's stored copy a few tens of kilobytes at most.
var DefaultPollLimits = PollLimits{Ballots: 400, PerAddress: 120}

// OpenPoll replaces any poll with a new, open one for question q (of
// choices choices) of the chapter the room runs.
func (s *State) OpenPoll(q, choices int) {
	var id uint64 = 1
	if s.Poll != nil {
		id = s.Poll.ID + 1
	}
	s.Poll = &Poll{ID: id, Lesson: s.Lesson, Runs: s.LessonRuns, Question: q, Choices: choices, Phase: PollOpen}
}

// OpenStepPoll replaces any poll with a new, open one on what the held
// request will do next from checkpoint at (lesson.StepQuestion).
func (s *State) OpenStepPoll(request, at, subject string, choices int) {
	s.OpenPoll(0, choices)
	s.Poll.Request, s.Poll.At, s.Poll.Subject = request, at, subject
}

// CloseStepPoll closes the open step mode question, if there is one:
// once the presenter steps the race on, the class has seen the answer
// start. It reports whether it closed one.
func (s *State) CloseStepPoll() bool {
	p := s.Poll
	if p == nil || p.Request == "" || p.Phase != PollOpen || p.Lesson != s.Lesson || p.Runs != s.LessonRuns {
		return false
	}
	cp := *p
	cp.Phase = PollClosed
	s.Poll = &cp
	return true
}

// current is the room's poll if it is poll id, else an error that says
// why it is not.
func (s *State) current(id uint64) (*Poll, error) {
	if s.Poll == nil {
		return nil, pay.Errorf(pay.EINVALID, "No question is open.")
	}
	if id != 0 && s.Poll.ID != id {
		return nil, pay.Errorf(pay.EINVALID, "That question has been replaced by another one: answer the one on the screen.")
	}
	if s.Poll.Lesson != s.Lesson || s.Poll.Runs != s.LessonRuns {
		return nil, pay.Errorf(pay.EINVALID, "That question belongs to a chapter the class has left.")
	}
	return s.Poll, nil
}

// Answer records session's answer to poll id: its first, or a change of
// it, while the poll is open.
func (s *State) Answer(id uint64, session, from string, choice int, lim PollLimits) error {
	p, err := s.current(id)
	if err != nil {
		return err
	}
	if p.Phase != PollOpen {
		return pay.Errorf(pay.EINVALID, "The vote is closed: answers can no longer change.")
	}
	if choice < 0 || choice >= p.Choices {
		return pay.Errorf(pay.EINVALID, "There is no choice %d: the question has %d.", choice+1, p.Choices)
	}
	if _, again := p.Ballots[session]; !again {
		if len(p.Ballots) >= lim.Ballots {
			return pay.Errorf(pay.EBUSY, "The vote already holds %d answers, as many as it takes.", lim.Ballots)
		}
		n := 0
		for _, b := range p.Ballots {
			if b.From == from {
				n++
			}
		}
		if n >= lim.PerAddress {
			return pay.Errorf(pay.EBUSY, "%d answers have come from your network already, as many as one address may give.", lim.PerAddress)
		}
	}
	next := make(map[string]Ballot, len(p.Ballots)+1)
	for k, v := range p.Ballots {
		next[k] = v
	}
	next[session] = Ballot{Choice: choice, From: from}
	cp := *p
	cp.Ballots = next
	s.Poll = &cp
	return nil
}

// ClosePoll ends the answers to poll id.
func (s *State) ClosePoll(id uint64) error {
	p, err := s.current(id)
	if err != nil {
		return err
	}
	if p.Phase == PollOpen {
		cp := *p
		cp.Phase = PollClosed
		s.Poll = &cp
	}
	return nil
}

// RevealPoll shows the split of poll id; it closes it first if it is
// still open.
func (s *State) RevealPoll(id uint64) error {
	p, err := s.current(id)
	if err != nil {
		return err
	}
	cp := *p
	cp.Phase = PollRevealed
	s.Poll = &cp
	return nil
}

// GradePoll records the server's outcome on poll id, once: the first
// event that showed an outcome grades the question, and a later one (or
// another server's narrator seeing the same event) changes nothing. An
// open poll is not graded: the class predicts before it observes.
func (s *State) GradePoll(id uint64, o PollOutcome) bool {
	p, err := s.current(id)
	if err != nil || p.Phase == PollOpen || p.Outcome != nil || o.Choice < 0 || o.Choice >= p.Choices {
		return false
	}
	cp := *p
	cp.Outcome = &o
	s.Poll = &cp
	s.score(&cp)
	return true
}

// Answered is how many phones have answered.
func (p *Poll) Answered() int { return len(p.Ballots) }

// Split counts the answers per choice.
func (p *Poll) Split() []int {
	out := make([]int, p.Choices)
	for _, b := range p.Ballots {
		if b.Choice >= 0 && b.Choice < len(out) {
			out[b.Choice]++
		}
	}
	return out
}

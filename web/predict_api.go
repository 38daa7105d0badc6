package web

import "paytwice/web/room"

// PollOpen is the body of POST /api/poll/open: the question to ask, by
// its index (from 0) in the current chapter's "ask" list.
type PollOpen struct {
	Question int `json:"question"`
}

// PollStep is the body of POST /api/poll/step: the held request whose
// next step the class predicts.
type PollStep struct {
	Request string `json:"request"`
}

// PollNickname is the body of POST /api/poll/nickname: the nickname this
// browser's student goes by on the scores, "" for none.
type PollNickname struct {
	Nickname string `json:"nickname"`
}

// PollScores is the body of POST /api/poll/scores: whether the board
// shows the scores.
type PollScores struct {
	Shown bool `json:"shown"`
}

// PollHide is the body of POST /api/poll/hide: a player, by the id the
// board gives it, taken off the board (or put back).
type PollHide struct {
	Player string `json:"player"`
	Hidden bool   `json:"hidden"`
}

// PollRef is the body of POST /api/poll/close and /api/poll/reveal: the
// vote, by its id.
type PollRef struct {
	ID uint64 `json:"id"`
}

// PollAnswer is the body of POST /api/poll/answer: the vote, and the
// choice (from 0).
type PollAnswer struct {
	ID     uint64 `json:"id"`
	Choice int    `json:"choice"`
}

// PollState is GET /api/poll: the vote as the asker may see it. Split
// and Outcome are absent until the presenter reveals.
type PollState struct {
	ID       uint64 `json:"id"`
	Lesson   string `json:"lesson"`
	Question int    `json:"question"`
	// Request and At name, for step mode's question, the held request and
	// its checkpoint.
	Request  string   `json:"request,omitempty"`
	At       string   `json:"at,omitempty"`
	Text     string   `json:"text"`
	Choices  []string `json:"choices"`
	Phase    string   `json:"phase"`
	Answered int      `json:"answered"`
	// Mine is this browser's answer, -1 for none.
	Mine    int               `json:"mine"`
	Split   []int             `json:"split,omitempty"`
	Outcome *room.PollOutcome `json:"outcome,omitempty"`
	// Nickname is this browser's nickname, "" for none; Right and Scored
	// its running score: the votes graded right, of those graded.
	Nickname string `json:"nickname,omitempty"`
	Right    int    `json:"right"`
	Scored   int    `json:"scored"`
	// Graded says, once revealed, whether the server has shown the outcome
	// yet.
	Graded bool `json:"graded"`
}

// PollLive is the body of GET /poll/live: the panel's version and, when
// it changed, its HTML.
type PollLive struct {
	V    uint64 `json:"v"`
	HTML string `json:"html,omitempty"`
}

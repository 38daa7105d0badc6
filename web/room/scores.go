package room

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"unicode"
	"unicode/utf8"

	"paytwice/pay"
)

// Scores: a student may pick a nickname, and then the room keeps a
// running score of the votes they got right, which the board shows when
// the presenter wants it. A student who picks none stays anonymous and is
// not scored. A nickname is the only thing a student sends that others
// see: it is short, printable, unique in the class, drawn as text, and the
// presenter can hide it (hiding sticks to the student, not the name, so a
// new name does not bring it back).

// Player is a student who picked a nickname.
type Player struct {
	Nick string `json:"nick"`
	// ID names the player on the board (its hide button) without saying
	// whose browser it is.
	ID string `json:"id"`
	// From is a hash of the address the nickname came from.
	From string `json:"from"`
	// Right and Graded count the player's votes the server graded, and
	// those it graded right.
	Right  int `json:"right"`
	Graded int `json:"graded"`
	// Hidden: the presenter took the nickname off the board.
	Hidden bool `json:"hidden,omitempty"`
}

// Scores is the class's nicknames and scores.
type Scores struct {
	// Shown: the board shows the scores.
	Shown bool `json:"shown,omitempty"`
	// Players by session hash (the ballots' key).
	Players map[string]Player `json:"players,omitempty"`
}

// MaxNick is the longest nickname, in characters.
const MaxNick = 20

// CleanNick checks a nickname a student sent: trimmed, at most MaxNick
// printable characters, no line breaks or control or formatting codes. ""
// means none.
func CleanNick(s string) (string, error) {
	s = strings.TrimSpace(s)
	if !utf8.ValidString(s) {
		return "", pay.Errorf(pay.EINVALID, "A nickname must be text (UTF-8).")
	}
	if n := utf8.RuneCountInString(s); n > MaxNick {
		return "", pay.Errorf(pay.EINVALID, "A nickname has at most %d characters; this one has %d.", MaxNick, n)
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return "", pay.Errorf(pay.EINVALID, "A nickname is letters, digits, spaces and signs: no line breaks, control or formatting characters (%U).", r)
		}
	}
	return s, nil
}

// PlayerID is the public name of a session's player: a short hash.
func PlayerID(session string) string {
	sum := sha256.Sum256([]byte("player\x00" + session))
	return hex.EncodeToString(sum[:6])
}

// SetNick gives session the nickname nick (CleanNick's), or takes its
// nickname and score away for "". A nickname another student holds is
// refused; the class and one address are bounded as the ballot box is.
func (s *State) SetNick(session, from, nick string, lim PollLimits) error {
	next := Scores{}
	if s.Scores != nil {
		next.Shown = s.Scores.Shown
	}
	next.Players = make(map[string]Player, len(s.playerMap())+1)
	for k, v := range s.playerMap() {
		next.Players[k] = v
	}
	me, had := next.Players[session]
	if nick == "" {
		if !had {
			return nil
		}
		delete(next.Players, session)
		s.Scores = &next
		return nil
	}
	for k, p := range next.Players {
		if k != session && strings.EqualFold(p.Nick, nick) {
			return pay.Errorf(pay.ECONFLICT, "Another student is called %q already: pick another nickname.", nick)
		}
	}
	if !had {
		if len(next.Players) >= lim.Ballots {
			return pay.Errorf(pay.EBUSY, "The class already has %d nicknames, as many as it takes: you can still vote without one.", lim.Ballots)
		}
		n := 0
		for _, p := range next.Players {
			if p.From == from {
				n++
			}
		}
		if n >= lim.PerAddress {
			return pay.Errorf(pay.EBUSY, "%d nicknames have come from your network already, as many as one address may have: you can still vote without one.", lim.PerAddress)
		}
		me = Player{ID: PlayerID(session), From: from}
	}
	me.Nick = nick
	next.Players[session] = me
	s.Scores = &next
	return nil
}

// ShowScores shows or hides the scores on the board.
func (s *State) ShowScores(on bool) {
	next := Scores{Shown: on, Players: s.playerMap()}
	s.Scores = &next
}

// HidePlayer takes the player with the public id off the board, or puts
// it back; false when there is none.
func (s *State) HidePlayer(id string, hidden bool) bool {
	for k, p := range s.playerMap() {
		if p.ID != id {
			continue
		}
		next := Scores{Shown: s.Scores.Shown, Players: make(map[string]Player, len(s.Scores.Players))}
		for k2, v := range s.Scores.Players {
			next.Players[k2] = v
		}
		p.Hidden = hidden
		next.Players[k] = p
		s.Scores = &next
		return true
	}
	return false
}

// Player is session's player, if it picked a nickname.
func (s *State) Player(session string) (Player, bool) {
	p, ok := s.playerMap()[session]
	return p, ok
}

func (s *State) playerMap() map[string]Player {
	if s.Scores == nil {
		return nil
	}
	return s.Scores.Players
}

// score counts poll p's graded outcome in the players' scores: every
// player who voted has one more vote graded, and those who picked the
// server's outcome one more right.
func (s *State) score(p *Poll) {
	if p.Outcome == nil || len(s.playerMap()) == 0 {
		return
	}
	next := Scores{Shown: s.Scores.Shown, Players: make(map[string]Player, len(s.Scores.Players))}
	for k, v := range s.Scores.Players {
		if b, voted := p.Ballots[k]; voted {
			v.Graded++
			if b.Choice == p.Outcome.Choice {
				v.Right++
			}
		}
		next.Players[k] = v
	}
	s.Scores = &next
}

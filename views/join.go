package views

import (
	"net"
)

// Join is where students join: the addresses the server listens on, best
// first, and the path of the QR code of the first. With no address, the
// server listens on loopback only: Listen says where, Local is the
// address that works on this machine, and Command is what was run to
// start it ("paytwice", or "paytwice cluster" behind its front door).
type Join struct {
	URLs    []string
	QR      string
	Listen  string
	Local   string
	Command string
}

// Port is the port the server listens on, for the command that starts it
// for a room.
func (j Join) Port() string {
	if _, p, err := net.SplitHostPort(j.Listen); err == nil && p != "" {
		return p
	}
	return "8080"
}

// RoomCommand starts the server again so that a room can reach it.
func (j Join) RoomCommand() string {
	cmd := j.Command
	if cmd == "" {
		cmd = "paytwice"
	}
	return cmd + " -addr :" + j.Port()
}

func joinClass(j Join) string {
	if len(j.URLs) == 0 {
		return "join join-unreachable"
	}
	return "join"
}

// StepBar is step mode as the board shows it: whether it is on, and the
// requests held at a checkpoint, oldest first.
type StepBar struct {
	On   bool
	Held []HeldRow
}

// HeldRow is one held request.
type HeldRow struct {
	Request, RowID, Checkpoint, OrderID, Who string
	// Answer is the status it is about to send ("" before "answered");
	// CanLose and CanCrash say which aimed faults can still change it.
	Answer            string
	CanLose, CanCrash bool
	// Click is which click of its page it is ("click 2"), when known.
	Click string
	// CanAsk says that the class can be asked what its next step will
	// do (lesson.StepQuestion).
	CanAsk bool
}

// HeldRowID is the element id of a held request's row in the step bar.
func HeldRowID(request string) string { return "held-" + request }

func stepBarClass(b StepBar) string {
	if b.On {
		return "card step-bar step-on"
	}
	return "card step-bar"
}

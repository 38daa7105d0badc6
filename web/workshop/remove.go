package workshop

import (
	"context"
	"fmt"
	"slices"
)

// The presenter's removals: one student, or every student (a reset).
// A removed student's registration, gateway, queued run and row go, and
// so do their gateway's books in Config.Books. Servers sharing the keeper
// learn of it from the kept document, which names the removed students'
// secrets: none of them writes such a student back, and each forgets
// the student at its next read (a save, a board, an announcement).

// maxRemembered bounds the removed secrets the kept document names: a
// room registers at most DefaultMaxStudents at a time, so this covers
// several resets in a row.
const maxRemembered = 1000

// removalAnnounced is the version announced on SettingsChannel after a
// removal.
const removalAnnounced = -1

// Remove removes the first student called name, hidden or not. It
// reports whether there was one; the error says the books could not be
// deleted (they are deleted at the next removal).
func (w *Workshop) Remove(ctx context.Context, name string) (bool, error) {
	n, err := w.remove(ctx, func(st *student) bool { return st.name == name }, true)
	return n > 0, err
}

// Reset removes every student: the workshop starts again with the same
// settings (open or closed, the faults). It reports how many went.
func (w *Workshop) Reset(ctx context.Context) (int, error) {
	return w.remove(ctx, func(*student) bool { return true }, false)
}

func (w *Workshop) remove(ctx context.Context, match func(*student) bool, first bool) (int, error) {
	w.mu.Lock()
	var gone []*student
	for _, st := range w.order {
		if match(st) {
			gone = append(gone, st)
			if first {
				break
			}
		}
	}
	for _, st := range gone {
		w.forgetLocked(st)
		w.remembered = append(w.remembered, st.secret)
		w.unbooked = append(w.unbooked, unbooked{st.secret, st.fence})
	}
	if over := len(w.remembered) - maxRemembered; over > 0 {
		w.remembered = slices.Delete(w.remembered, 0, over)
	}
	pending := slices.Clone(w.unbooked)
	if len(gone) > 0 {
		w.changedLocked()
	}
	w.mu.Unlock()
	if len(gone) > 0 && w.cfg.Keeper != nil {
		// Kept at once, so that every board read after this answer has
		// the students gone; the saver writes it again should this fail.
		w.save(ctx)
		if w.cfg.Announce != nil {
			// A version below any: every server reads the kept
			// document at once and forgets the students gone.
			if err := w.cfg.Announce(ctx, removalAnnounced); err != nil {
				w.cfg.Logf("workshop: telling the other servers of the removal: %v", err)
			}
		}
	}
	if w.cfg.Books == nil || len(pending) == 0 {
		return len(gone), nil
	}
	// A charge already inside a removed student's gateway reaches the
	// books before they are deleted below, or is refused; the removal
	// waits for it as long as ctx lasts, and past that leaves the books
	// to the next removal, which waits for it again.
	secrets := make([]string, 0, len(pending))
	for _, u := range pending {
		if err := u.fence.closeAndWait(ctx); err != nil {
			return len(gone), fmt.Errorf("workshop: the removed students' gateway books wait for a charge on its way to them: %w", err)
		}
		secrets = append(secrets, u.secret)
	}
	if err := w.cfg.Books.DeleteWorkshopBooks(ctx, secrets...); err != nil {
		return len(gone), fmt.Errorf("workshop: deleting the removed students' gateway books: %w", err)
	}
	w.mu.Lock()
	w.unbooked = slices.DeleteFunc(w.unbooked, func(u unbooked) bool { return slices.Contains(secrets, u.secret) })
	w.mu.Unlock()
	return len(gone), nil
}

// unbooked is a removed student whose gateway's books are still to be
// deleted, and the fence their charges pass.
type unbooked struct {
	secret string
	fence  *booksFence
}

// forgetLocked takes st out of the workshop: its gateway answers no
// more, its queued run goes, a run under way is no longer shown. w.mu is
// held.
func (w *Workshop) forgetLocked(st *student) {
	delete(w.students, st.who)
	delete(w.bySecret, st.secret)
	st.fence.close()
	if w.perAddr[st.addr]--; w.perAddr[st.addr] <= 0 {
		delete(w.perAddr, st.addr)
	}
	w.order = slices.DeleteFunc(w.order, func(s *student) bool { return s == st })
	if slices.Contains(w.queue, st) {
		w.queue = slices.DeleteFunc(w.queue, func(s *student) bool { return s == st })
		select {
		case <-w.ready: // its token: the tokens never outnumber the queue
		default: // a worker holds it, and finds the queue shorter
		}
	}
}

// forgetRemovedLocked forgets the students another server removed, as
// the kept document names them. w.mu is held.
func (w *Workshop) forgetRemovedLocked(removed []string) {
	for _, secret := range removed {
		if st := w.bySecret[secret]; st != nil {
			w.forgetLocked(st)
		}
	}
}

// removedLocked says whether secret is a removed student's, as this
// server or the kept document (removed) knows. w.mu is held.
func (w *Workshop) removedLocked(secret string, removed []string) bool {
	return slices.Contains(w.remembered, secret) || slices.Contains(removed, secret)
}

package web

// paySlot is one payment's turn at work; the zero and nil slots are the
// turn of a payment that was never counted (the presenter's).
type paySlot struct {
	a      *paymentAdmission
	ip     string
	paused bool
	ended  bool
	// presenter is set on the presenter's payments instead of a: while
	// one is at work (not paused), the students' work steps aside; leave
	// ends that.
	presenter *presenterAtWork
	leave     func()
}

// pause gives the turn back while the payment waits on something that
// costs the server nothing.
func (s *paySlot) pause() {
	if s == nil || s.paused || s.ended {
		return
	}
	s.paused = true
	if s.presenter != nil {
		s.leave()
		return
	}
	s.release()
}

// release hands the payment's turn to the next one waiting.
func (s *paySlot) release() {
	a := s.a
	a.mu.Lock()
	defer a.mu.Unlock()
	ad := a.addrs[s.ip]
	ad.working--
	a.working--
	a.serveLocked()
	a.forgetLocked(s.ip, ad)
}

// resume takes the turn again, at once: payments may be at work beyond
// the share for a moment, never stuck behind those waiting on them.
func (s *paySlot) resume() {
	if s == nil || !s.paused || s.ended {
		return
	}
	s.paused = false
	if s.presenter != nil {
		s.leave = s.presenter.enter()
		return
	}
	a := s.a
	a.mu.Lock()
	defer a.mu.Unlock()
	ad := a.addrs[s.ip]
	if ad == nil {
		ad = &payAddress{queues: map[string][]*payWaiter{}}
		a.addrs[s.ip] = ad
	}
	ad.working++
	a.working++
}

// done ends the payment's turn.
func (s *paySlot) done() {
	if s == nil || s.ended {
		return
	}
	s.ended = true
	if s.paused { // a paused payment gave its turn back already
		return
	}
	if s.presenter != nil {
		s.leave()
		return
	}
	s.release()
}

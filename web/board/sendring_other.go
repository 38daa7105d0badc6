//go:build !linux

package board

import "errors"

// sendRing is Linux's io_uring (sendring_linux.go); elsewhere the writer
// writes one socket at a time.
type sendRing struct{}

func newSendRing() (*sendRing, error) { return nil, errors.New("no io_uring on this system") }

func (r *sendRing) close() {}

func (r *sendRing) send(ws []pageWrite) bool { return false }

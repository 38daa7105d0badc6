package room

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
)

// errHasBooks is EnsureBooks' way to write nothing.
var errHasBooks = errors.New("the room names its books already")

// EnsureBooks gives the room its Books once: the first server that finds
// none draws it, in one change, so that servers starting together on one
// database agree on it.
func EnsureBooks(ctx context.Context, r *Room[State]) error {
	if r.Load().Books != 0 {
		return nil
	}
	_, _, err := r.Change(ctx, func(st *State) error {
		if st.Books != 0 {
			return errHasBooks
		}
		var b [8]byte
		_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
		st.Books = binary.BigEndian.Uint64(b[:])&(1<<53-1) | 1
		return nil
	})
	if errors.Is(err, errHasBooks) {
		return nil
	}
	return err
}

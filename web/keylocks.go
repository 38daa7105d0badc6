package web

import (
	"context"
	"errors"
	"sync"
)

// keyLocks is the lab's "lock in memory" (lab_memory_lock.go, payMemoryLock): a
// mutex per (scope, key), held in this process's memory. It is what an
// application reaches for when it knows two requests must not run one key
// at once, and it works, but only among the requests that share this
// process: a server beside it on the same database has a map of its own.
//
// Each lock is a channel with room for one token, so that a waiter can
// give up when its client hangs up, which sync.Mutex cannot. An entry
// counts the requests holding or waiting for it and is deleted when the
// last one leaves, so the map holds only keys in use; it never holds more
// than max of them.
type keyLocks struct {
	mu    sync.Mutex
	locks map[lockName]*keyLock
	max   int
}

type lockName struct{ scope, key string }

type keyLock struct {
	token chan struct{} // full while held
	users int           // holders and waiters; guarded by keyLocks.mu
}

// errTooManyLocks is the answer when the map is full: more keys are being
// worked on at once than the lab lets one server hold.
var errTooManyLocks = errors.New("too many keys locked at once")

func newKeyLocks(max int) *keyLocks {
	return &keyLocks{locks: map[lockName]*keyLock{}, max: max}
}

// lock takes the lock of (scope, key), waiting while another request
// holds it, until ctx ends; onWait is called first when it has to wait.
// After a nil error, unlock releases the lock; calling it again does
// nothing.
func (k *keyLocks) lock(ctx context.Context, scope, key string, onWait func()) (unlock func(), err error) {
	name := lockName{scope, key}
	k.mu.Lock()
	l := k.locks[name]
	if l == nil {
		if len(k.locks) >= k.max {
			k.mu.Unlock()
			return nil, errTooManyLocks
		}
		l = &keyLock{token: make(chan struct{}, 1)}
		k.locks[name] = l
	}
	l.users++
	k.mu.Unlock()

	select {
	case l.token <- struct{}{}:
	default:
		onWait()
		select {
		case l.token <- struct{}{}:
		case <-ctx.Done():
			// A client that hung up while waiting leaves the queue; the
			// entry goes with the last user.
			k.leave(name, l)
			return nil, ctx.Err()
		}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			<-l.token
			k.leave(name, l)
		})
	}, nil
}

// leave drops one user of a lock, and the entry with its last user.
func (k *keyLocks) leave(name lockName, l *keyLock) {
	k.mu.Lock()
	defer k.mu.Unlock()
	l.users--
	if l.users == 0 {
		delete(k.locks, name)
	}
}

// len is how many keys are locked or waited for now.
func (k *keyLocks) len() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.locks)
}

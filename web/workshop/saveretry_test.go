package workshop

import (
	"context"
	"errors"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"
)

// refusingKeeper refuses its first refuse saves, as a store whose lock
// was held too long or whose connection dropped does, then keeps.
type refusingKeeper struct {
	memoryKeeper
	refuse atomic.Int32
}

func (k *refusingKeeper) UpdateWorkshop(ctx context.Context, change func([]byte) ([]byte, error)) error {
	if k.refuse.Add(-1) >= 0 {
		return errors.New("canceling statement due to lock timeout")
	}
	return k.memoryKeeper.UpdateWorkshop(ctx, change)
}

// TestARefusedSaveIsTriedAgain: a change whose save the store refused is
// kept by a later save without another change to ask for it, within
// saveRetryAfter, however long SaveEvery is: a workshop that went quiet
// after a refused save kept the scoreboard as it was before the change.
func TestARefusedSaveIsTriedAgain(t *testing.T) {
	keeper := &refusingKeeper{}
	keeper.refuse.Store(2)
	w := New(Config{Guard: NewGuard(Nets(netip.MustParsePrefix("127.0.0.2/32"))), Keeper: keeper, SaveEvery: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	w.Start(ctx)
	defer cancel()
	w.SetOn(true) // the one change: no other comes
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(5 * time.Millisecond) {
		keeper.mu.Lock()
		saves := keeper.saves
		keeper.mu.Unlock()
		if saves == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after two refused saves and two minutes, %d saves: the change was not tried again", saves)
		}
	}
	if n := keeper.refuse.Load(); n >= 0 {
		t.Fatalf("the keeper refused %d saves, want 2 before the one kept", 2-n)
	}
}

package postgres_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"paytwice/pay/peers"
	"paytwice/store/postgres"
)

// counterRoom is a room state for the tests: one number per server that
// changes it, so a lost update shows as a missing count.
type counterRoom map[string]int

func TestRoomUpdatesOnSeveralServersAllSurvive(t *testing.T) {
	ownDatabase(t)
	dbs := servers(t, 3, postgres.Options{})
	state, version, err := dbs[0].LoadRoom(ctx)
	if err != nil || version != 0 || string(state) != "{}" {
		t.Fatalf("fresh room: %s version %d, %v", state, version, err)
	}
	notified, listening := listen(t, dbs[2], postgres.RoomChannel)
	receive(t, listening, "start of listening")

	const each = 20
	var wg sync.WaitGroup
	for i, db := range dbs {
		name := fmt.Sprint("server", i)
		wg.Go(func() {
			for range each {
				_, _, err := db.UpdateRoom(ctx, func(old []byte) ([]byte, error) {
					var r counterRoom
					if err := json.Unmarshal(old, &r); err != nil {
						return nil, err
					}
					r[name]++
					return json.Marshal(r)
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	state, version, err = dbs[1].LoadRoom(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var r counterRoom
	if err := json.Unmarshal(state, &r); err != nil {
		t.Fatal(err)
	}
	if version != 3*each || r["server0"] != each || r["server1"] != each || r["server2"] != each {
		t.Fatalf("version %d, counts %v: want %d each", version, r, each)
	}
	// Every version is announced once, in order, to every listener.
	for want := int64(1); want <= 3*each; want++ {
		if got := receive(t, notified, "a room notification"); got != strconv.FormatInt(want, 10) {
			t.Fatalf("notification %q, want %d", got, want)
		}
	}

	t.Run("a change that fails changes nothing and announces nothing", func(t *testing.T) {
		refused := errors.New("refused")
		if _, _, err := dbs[0].UpdateRoom(ctx, func([]byte) ([]byte, error) { return nil, refused }); !errors.Is(err, refused) {
			t.Fatalf("got %v, want the change's own error", err)
		}
		if _, v, err := dbs[0].LoadRoom(ctx); err != nil || v != version {
			t.Fatalf("version %d after a failed change, want %d (%v)", v, version, err)
		}
		if _, v, err := dbs[0].UpdateRoom(ctx, func(old []byte) ([]byte, error) { return old, nil }); err != nil || v != version+1 {
			t.Fatalf("next change: version %d, %v", v, err)
		}
		if got := receive(t, notified, "a room notification"); got != strconv.FormatInt(version+1, 10) {
			t.Fatalf("after a failed change the next notification is %q, want %d", got, version+1)
		}
	})
}

// Wrong tokens counted by several servers at once, a client's first ones
// included, all count; records older than the caller's horizon are
// forgotten.
func TestGuessesOnSeveralServersAllCount(t *testing.T) {
	ownDatabase(t)
	dbs := servers(t, 3, postgres.Options{})
	at := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	if _, ok, err := dbs[0].LoadGuesses(ctx, "192.0.2.7"); ok || err != nil {
		t.Fatalf("a client with no guesses: ok %v, %v", ok, err)
	}
	const each = 10
	var wg sync.WaitGroup
	for _, db := range dbs {
		wg.Go(func() {
			for range each {
				err := db.UpdateGuesses(ctx, "192.0.2.7", at.Add(-time.Minute), func(old peers.Guesses, ok bool) peers.Guesses {
					if !ok {
						old.Left = 100
					}
					return peers.Guesses{Left: old.Left - 1, At: at}
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	g, ok, err := dbs[1].LoadGuesses(ctx, "192.0.2.7")
	if err != nil || !ok || g.Left != 100-3*each || !g.At.Equal(at) {
		t.Fatalf("after %d wrong tokens: %+v ok %v, %v; want %d left", 3*each, g, ok, err, 100-3*each)
	}
	// A later update of another client with a horizon past the first's
	// record forgets it.
	later := at.Add(time.Hour)
	if err := dbs[2].UpdateGuesses(ctx, "198.51.100.1", later.Add(-time.Minute), func(peers.Guesses, bool) peers.Guesses {
		return peers.Guesses{Left: 4, At: later}
	}); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := dbs[0].LoadGuesses(ctx, "192.0.2.7"); ok || err != nil {
		t.Fatalf("an old record is kept: ok %v, %v", ok, err)
	}
}

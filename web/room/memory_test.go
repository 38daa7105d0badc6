package room_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"paytwice/web/room"
)

// within bounds a wait on a channel: long enough for a loaded machine,
// short enough that a broken test ends.
const within = 10 * time.Second

func TestMemoryRoomIsOneRoomForEveryFollower(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := room.SharedMemory()
	heard := make(chan string, 10)
	listening := make(chan struct{})
	done := make(chan error)
	go func() {
		done <- m.ListenRoom(ctx, "a server", func() { close(listening) }, func(v string) { heard <- v })
	}()
	<-listening
	if members, err := m.RoomMembers(ctx); err != nil || !slices.Equal(members, []string{"a server"}) {
		t.Fatalf("members %v %v", members, err)
	}
	for i := range 3 {
		state, v, err := m.UpdateRoom(ctx, func(old []byte) ([]byte, error) { return fmt.Appendf(nil, `{"n":%d}`, i), nil })
		if err != nil || v != int64(i+1) || string(state) != fmt.Sprintf(`{"n":%d}`, i) {
			t.Fatalf("update %d: %s %d %v", i, state, v, err)
		}
	}
	if _, _, err := m.UpdateRoom(ctx, func([]byte) ([]byte, error) { return nil, fmt.Errorf("refused") }); err == nil {
		t.Fatal("a refused change was written")
	}
	for want := 1; want <= 3; want++ {
		select {
		case v := <-heard:
			if v != fmt.Sprint(want) {
				t.Fatalf("heard version %s, want %d", v, want)
			}
		case <-time.After(within):
			t.Fatalf("version %d never announced", want)
		}
	}
	if state, v, err := m.LoadRoom(ctx); err != nil || v != 3 || string(state) != `{"n":2}` {
		t.Fatalf("load: %s %d %v", state, v, err)
	}
	cancel()
	<-done
	if members, _ := m.RoomMembers(context.Background()); len(members) != 0 {
		t.Fatalf("a follower that stopped is still a member: %v", members)
	}
}

func TestMemoryNotifiesEveryListenerInOrder(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := room.SharedMemory()
	type got struct{ channel, payload string }
	var chans [2]chan got
	for i := range chans {
		chans[i] = make(chan got, 100)
		listening := make(chan struct{})
		go func() {
			_ = m.ListenEach(ctx, []string{"a", "b"}, func() { close(listening) }, func(c, p string) { chans[i] <- got{c, p} })
		}()
		<-listening
	}
	for i := range 20 {
		if err := m.Notify(ctx, []string{"a", "b", "unheard"}[i%3], fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	for _, ch := range chans {
		for i := range 20 {
			if i%3 == 2 {
				continue
			}
			select {
			case g := <-ch:
				if g.payload != fmt.Sprint(i) || g.channel != []string{"a", "b"}[i%3] {
					t.Fatalf("heard %+v, want %d", g, i)
				}
			case <-time.After(within):
				t.Fatalf("notification %d never heard", i)
			}
		}
	}
	if err := m.Notify(ctx, "a", strings.Repeat("x", room.MaxPayload+1)); err == nil {
		t.Fatal("a payload over the limit was sent")
	}
}

func TestMemoryOfOneServerIsNotShared(t *testing.T) {
	if room.Memory().Shared() || !room.SharedMemory().Shared() {
		t.Fatal("Memory is a server on its own, SharedMemory a class of several")
	}
}

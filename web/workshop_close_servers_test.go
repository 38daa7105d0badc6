package web

import (
	"net/http"
	"strings"
	"testing"
)

// TestWorkshopClosedOnOneServerLeavesAnotherServersBoard: two servers on
// one PostgreSQL database (the room's peers carry what one server saves
// to the other). The presenter opens the workshop on the first server; a
// board on the second, reading its own server's event stream as the
// board's script does, is told (a frame with the workshop mark) and its
// scoreboard part shows the workshop. Closed on the first server, the
// second server's stream tells the board again and the same part answers
// the closed workshop's empty place; a student's page there says the
// workshop is closed.
func TestWorkshopClosedOnOneServerLeavesAnotherServersBoard(t *testing.T) {
	waitsOnRealClocks(t) // two servers on the real clock, their news on PostgreSQL's notifications
	const presenter = "teach-close-servers"
	c := newPostgresClass(t)
	c.postgresOnly(t)
	cfg := Config{WorkshopAllow: workshopStudentNets, PresenterToken: presenter}
	a, b := c.server(cfg, nil), c.server(cfg, nil)
	for _, e := range []*testEnv{a, b} {
		waitUntil(t, "the relay to listen", func() bool { return e.Server.servers.relay.Listening() > 0 })
	}
	stream := openStream(t, b, "")
	const scores, place = `<div id="workshop-scores"`, `<template id="board-workshop">`
	// boardTold reads the second server's stream, as its board does: after
	// each frame with the workshop mark it asks for the scoreboard part,
	// until the answer holds want. The stream's own bound (waitUntilBound)
	// fails a board that is never told.
	boardTold := func(want string) {
		t.Helper()
		for {
			if f := stream.nextFrame(); !strings.Contains(f.Data, "<!--workshop-->") {
				continue
			}
			if part := b.get("/board/-/workshop?part=scores"); part.Status == http.StatusOK && strings.Contains(string(part.Body), want) {
				return
			}
		}
	}

	if r := a.send(http.MethodPut, workshopAPI, WorkshopSettings{On: &workshopOpen}, PresenterHeader, presenter); r.Status != http.StatusOK {
		t.Fatalf("opening the workshop on the first server: %d %s", r.Status, r.Body)
	}
	boardTold(scores)

	if r := a.send(http.MethodPut, workshopAPI, WorkshopSettings{On: &workshopClosed}, PresenterHeader, presenter); r.Status != http.StatusOK {
		t.Fatalf("closing the workshop on the first server: %d %s", r.Status, r.Body)
	}
	boardTold(place)
	if part := string(b.get("/board/-/workshop?part=scores").Body); strings.Contains(part, scores) {
		t.Fatalf("the second server's board still shows the closed workshop: %.300s", part)
	}
	// The second server takes the closed setting itself when it hears the
	// first one's announcement, apart from the board's news: a student's
	// page there asks every two seconds until it says so.
	waitUntil(t, "a student's page on the second server to say the workshop is closed", func() bool {
		return strings.Contains(string(b.get("/workshop/-/state").Body), "The workshop is closed")
	})
}

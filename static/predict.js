// predict.js: the class's vote on a lesson question ("predict, then
// observe"). The panel is drawn by the server (GET /poll/live); this
// script only asks for it again after a frame of the page's event stream
// that changed the room (the "<!--room-->" mark) or when the stream opens
// again, and sends the buttons' clicks to the JSON API.
(function () {
  "use strict";

  function slot() { return document.getElementById("poll"); }

  var busy = false, again = false, timer = null;

  function refresh() {
    var s = slot();
    if (!s) { return; }
    if (busy) { again = true; return; }
    busy = true;
    var q = "v=" + encodeURIComponent(s.dataset.vPoll || "0") + (s.dataset.board === "true" ? "&board=1" : "");
    fetch("/poll/live?" + q, { credentials: "same-origin", cache: "no-store", headers: { "Accept": "application/json" } })
      .then(function (r) { return r.status === 200 ? r.json() : null; })
      .then(function (data) {
        if (!data) { return; }
        // Patched in, not replaced (morph.js): other students' answers
        // redraw the panel on every phone while this one taps or types.
        var fresh = s.cloneNode(false);
        fresh.innerHTML = data.html;
        window.paytwiceMorph(s, fresh, true);
        s.dataset.vPoll = String(data.v);
        var panel = s.querySelector(".poll-panel");
        s.hidden = !panel || panel.dataset.shown !== "true";
      }, function () { /* the next frame asks again */ })
      .finally(function () {
        busy = false;
        if (again) { again = false; schedule(); }
      });
  }

  function schedule() {
    clearTimeout(timer);
    timer = setTimeout(refresh, 80);
  }

  function onFrame(ev) {
    var data = ev.detail && ev.detail.data;
    if (typeof data === "string" && data.indexOf("<!--room-->") >= 0) { schedule(); return; }
    // A panel that follows step mode (the scheduler's puzzle, and the
    // presenter's offer to start one) asks again after any frame: held
    // requests come and go without the room changing. The server answers
    // 204 while the panel stays the same.
    var panel = slot() && slot().querySelector(".poll-panel");
    if (panel && panel.dataset.follow === "true") { schedule(); }
  }

  function say(text) {
    var e = document.getElementById("poll-error");
    if (!e) { return; }
    e.textContent = text;
    e.hidden = !text;
  }

  function send(path, body) {
    window.paytwiceAPI("POST", path, body).then(function (res) {
      if (res.ok) { say(""); schedule(); return; }
      if (res.status === 403) {
        // The step bar's refusal says who holds it; the others are the
        // presenter's.
        var own = path.indexOf("/api/step/") === 0 && res.body && res.body.detail;
        say(own ? "Refused (403): " + res.body.detail : window.paytwiceNotPresenter());
        return;
      }
      say("Refused (" + (res.status || "no answer") + "): " + ((res.body && (res.body.detail || res.body.title)) || "error"));
      schedule();
    });
  }

  function onClick(ev) {
    var ask = ev.target.closest && ev.target.closest("button[data-poll-step]");
    if (ask) {
      // Step mode's row: ask what this held request's next step will do.
      send("/api/poll/step", { request: ask.dataset.pollStep });
      return;
    }
    var b = ev.target.closest && ev.target.closest("#poll button");
    if (!b) { return; }
    var d = b.dataset;
    if (d.puzzleStep !== undefined) {
      // The step bar's holder steps one of the puzzle's held requests.
      send("/api/step/" + (d.puzzleStep === "finish" ? "finish" : "next"), { request: d.request });
    } else if (d.puzzleStart !== undefined) {
      send("/api/puzzle/start", { request: d.puzzleStart });
    } else if (d.puzzleEnd !== undefined) {
      send("/api/puzzle/end");
    } else if (d.puzzleBar !== undefined) {
      send("/api/puzzle/bar", { player: d.puzzleBar });
    } else if (d.pollUnhide !== undefined) {
      send("/api/poll/hide", { player: d.pollUnhide, hidden: false });
    } else if (d.pollClear !== undefined) {
      send("/api/poll/scores/clear");
    } else if (d.pollAnswer !== undefined) {
      var list = b.closest("[data-poll-id]");
      send("/api/poll/answer", { id: Number(list.dataset.pollId), choice: Number(d.pollAnswer) });
    } else if (d.pollOpen !== undefined) {
      send("/api/poll/open", { question: Number(d.pollOpen) });
    } else if (d.pollClose !== undefined) {
      send("/api/poll/close", { id: Number(d.pollClose) });
    } else if (d.pollReveal !== undefined) {
      send("/api/poll/reveal", { id: Number(d.pollReveal) });
    } else if (d.pollScores !== undefined) {
      send("/api/poll/scores", { shown: d.pollScores === "true" });
    } else if (d.pollHide !== undefined) {
      send("/api/poll/hide", { player: d.pollHide, hidden: true });
    }
  }

  function onSubmit(ev) {
    var f = ev.target.closest && ev.target.closest("#poll-nick");
    if (!f) { return; }
    ev.preventDefault();
    send("/api/poll/nickname", { nickname: f.querySelector("input").value });
  }

  function start() {
    document.addEventListener("htmx:sseMessage", onFrame);
    document.addEventListener("htmx:sseOpen", schedule);
    document.addEventListener("click", onClick);
    document.addEventListener("submit", onSubmit);
    refresh();
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();

// board.js: step mode's buttons and keys on the board.
//
// The step bar is drawn by the server and kept current by the event
// stream, on every page alike. Its buttons call the step API
// (/api/step, /api/step/next, /finish, /play); the server lets only the
// presenter use them. Keys: N next, F finish, P play, S step mode on/off,
// for the oldest held request.
//
// The presenter hides a row, or a student's rows, with one click.
//
// On a projector it keeps the charges per order to the rows that fit
// whole in the counters' panel.
//
// It also highlights, in the timeline, the rows that made a lesson's
// points: each ticked "Watch for" item names its row (data-row).
//
// The workshop's scoreboard is asked for again (GET /board/-/workshop)
// after a frame of the event stream that changed it (the
// "<!--workshop-->" mark) and when the stream opens again, never on a
// timer: a red row reaches the room as the run finds it.
(function () {
  "use strict";

  var api = window.paytwiceAPI; // static/api.js

  function $(id) { return document.getElementById(id); }

  function status(text) {
    var out = $("step-status");
    if (out) { out.textContent = text; }
  }

  function act(what, request, fault) {
    var call;
    switch (what) {
      case "on": call = api("PUT", "/api/step", { on: true }); break;
      case "off": call = api("PUT", "/api/step", { on: false }); break;
      case "next": call = api("POST", "/api/step/next", request ? { request: request } : undefined); break;
      case "finish": call = api("POST", "/api/step/finish", request ? { request: request } : undefined); break;
      case "play": call = api("POST", "/api/step/play"); break;
      case "aim": call = api("POST", "/api/step/aim", { request: request, fault: fault }); break;
      default: return;
    }
    call.then(function (res) {
      if (res.ok) { return; }
      if (res.status === 403) { status(window.paytwiceNotPresenter()); return; }
      status("Refused (" + (res.status || "no answer") + "): " + ((res.body && (res.body.detail || res.body.title)) || "error"));
    });
  }

  document.addEventListener("click", function (ev) {
    var btn = ev.target && ev.target.closest && ev.target.closest("[data-step]");
    if (!btn || !btn.closest("#step-bar")) { return; }
    act(btn.dataset.step, btn.dataset.request || "", btn.dataset.fault || "");
  });

  // The presenter's one click: a row, or every row of its student, off
  // every page's timeline (POST /api/board/hide; the server removes it).
  document.addEventListener("click", function (ev) {
    var btn = ev.target && ev.target.closest && ev.target.closest("[data-hide-row]");
    if (!btn || !btn.closest(".board")) { return; }
    api("POST", "/api/board/hide", { row: btn.dataset.hideRow, student: btn.dataset.hideStudent === "true" }).then(function (res) {
      if (res.ok) { return; }
      if (res.status === 403) { status(window.paytwiceNotPresenter()); return; }
      status("Not hidden (" + (res.status || "no answer") + "): " + ((res.body && (res.body.detail || res.body.title)) || "error"));
    });
  });

  var keys = { n: "next", f: "finish", p: "play" };
  document.addEventListener("keydown", function (ev) {
    if (ev.ctrlKey || ev.metaKey || ev.altKey || ev.repeat) { return; }
    var t = ev.target;
    if (t && (t.isContentEditable || /^(INPUT|SELECT|TEXTAREA)$/.test(t.tagName))) { return; }
    var bar = $("step-bar");
    var board = document.querySelector(".board");
    if (!bar || !board || board.dataset.presenter !== "true") { return; }
    var k = ev.key.toLowerCase();
    var on = bar.classList.contains("step-on");
    if (k === "s") { act(on ? "off" : "on"); ev.preventDefault(); return; }
    if (on && keys[k]) { act(keys[k], ""); ev.preventDefault(); }
  });

  // ------------------------------------------------------- watched rows

  var pending = false;
  function markWatched() {
    pending = false;
    var want = {};
    var items = document.querySelectorAll("#lesson .watch-item.seen[data-row]");
    for (var i = 0; i < items.length; i++) { if (items[i].dataset.row) { want[items[i].dataset.row] = true; } }
    var marked = document.querySelectorAll(".tl-row.watched");
    for (var j = 0; j < marked.length; j++) {
      if (!want[marked[j].id]) { marked[j].classList.remove("watched"); }
    }
    Object.keys(want).forEach(function (id) {
      var row = $(id);
      if (row && !row.classList.contains("watched")) { row.classList.add("watched"); }
    });
  }
  function schedule() {
    if (!pending) { pending = true; requestAnimationFrame(function () { markWatched(); fitOrders(); }); }
  }

  // ------------------------------------------------- charges per order

  // On a projector running a chapter the counters' panel is as tall as
  // the grid lets it be (board.css), and the charges per order would end
  // on a row cut in half at its edge. The rows that do not fit whole step
  // aside (the Charges tile still counts them), the list's heading too
  // when it does not fit or no row does; they come back as soon as there is room. Where
  // the panel does not clip (the page scrolls), every row shows.
  function fitOrders() {
    var orders = $("orders");
    if (!orders) { return; }
    var unseen = orders.querySelectorAll(".order-unseen");
    for (var i = 0; i < unseen.length; i++) { unseen[i].classList.remove("order-unseen"); }
    orders.classList.remove("order-unseen");
    var heading = orders.querySelector(":scope > h3");
    if (heading) { delete heading.dataset.more; }
    var panel = orders.closest(".panel-counters");
    if (!panel || getComputedStyle(panel).overflowY === "visible" || !orders.checkVisibility()) { return; }
    var box = panel.getBoundingClientRect();
    var bottom = Math.min(box.top + panel.clientTop + panel.clientHeight, window.innerHeight) + 0.5;
    var head = orders.querySelectorAll(":scope > h3, #orders-alarm");
    for (var h = 0; h < head.length; h++) {
      if (head[h].getBoundingClientRect().bottom > bottom) { orders.classList.add("order-unseen"); return; }
    }
    // Measured first, hidden after: hiding a row moves none above it.
    var rows = orders.querySelectorAll("#orders-list > li, #orders-more, :scope > p.muted");
    var cut = [];
    for (var r = 0; r < rows.length; r++) {
      if (rows[r].getBoundingClientRect().bottom > bottom) { cut.push(rows[r]); }
    }
    // A heading over no row would read as "no charges": the list steps
    // aside whole.
    if (cut.length && cut.length === rows.length) { orders.classList.add("order-unseen"); return; }
    for (var c = 0; c < cut.length; c++) { cut[c].classList.add("order-unseen"); }
    // A list that stepped rows aside says so: a red order may be among
    // them, and the list must not read as complete.
    if (cut.length && heading) { heading.dataset.more = "true"; }
  }

  var board = document.querySelector(".board");
  if (board && window.MutationObserver) {
    new MutationObserver(schedule).observe(board, { childList: true, subtree: true });
  }
  var counters = document.querySelector(".panel-counters");
  if (counters && window.ResizeObserver) { new ResizeObserver(schedule).observe(counters); }
  window.addEventListener("resize", schedule);
  schedule();

  // -------------------------------------------------- workshop scoreboard

  var scoresBusy = false, scoresAgain = false;
  function refreshScores() {
    // A board opened while the workshop was closed has only its place
    // (a <template>): it asks for the whole panel until it opens. An open
    // panel asks for its scoreboard alone, not to redraw the presenter's
    // switches under their hands; the answer is the whole panel's place
    // instead when the workshop closed meanwhile.
    var place = $("board-workshop");
    if (!place) { return; }
    var whole = place.tagName === "TEMPLATE";
    if (scoresBusy) { scoresAgain = true; return; }
    scoresBusy = true;
    fetch(whole ? "/board/-/workshop" : "/board/-/workshop?part=scores", { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { return r.status === 200 ? r.text() : null; })
      .then(function (html) {
        if (html === null) { return; }
        // The answer replaces the element with its id: the scoreboard,
        // or the whole panel (opened) or its place (closed).
        var parsed = document.createElement("template");
        parsed.innerHTML = html;
        var next = parsed.content.firstElementChild;
        var cur = next && next.id ? $(next.id) : null;
        if (cur) { cur.outerHTML = html; }
      }, function () { /* the next change, or the stream opening again, asks again */ })
      .finally(function () {
        scoresBusy = false;
        if (scoresAgain) { scoresAgain = false; refreshScores(); }
      });
  }
  document.addEventListener("htmx:sseMessage", function (ev) {
    var data = ev.detail && ev.detail.data;
    if (typeof data === "string" && data.indexOf("<!--workshop-->") >= 0) { refreshScores(); }
  });
  document.addEventListener("htmx:sseOpen", refreshScores);
})();

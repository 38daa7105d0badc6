// lab.js: the common-mistakes lab and the guided lessons.
//
// - The lab's switches and the lesson buttons call the JSON API
//   (/api/lab, /api/lab/prune, /api/lessons/current, and the fault and
//   clock endpoints); the presenter's cookie goes with them.
// - The lab has no event stream of its own. Its measured numbers arrive
//   with the page's one stream, swapped in by htmx like the other panels.
//   A frame of an event that changed the room carries a mark
//   ("<!--room-->"); after one (and when the stream opens again) the page
//   asks /lab/live, with the versions it shows, for whatever changed: the
//   switches, the lesson, and for the checkout card the room's resets and
//   changes (pay.js listens for "paytwice:room"). Payments alone ask
//   nothing.
// - pay.js reads the client-side switches from the page when it pays, so
//   a switch the presenter flips reaches every browser with the next frame.
(function () {
  "use strict";

  var EMAIL_KEY = "paytwice.lab.email.v1";

  function $(id) { return document.getElementById(id); }

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) { e.className = cls; }
    if (text !== undefined) { e.textContent = text; }
    return e;
  }
  function badge(text, tone) { return el("span", "badge " + tone, text); }

  function say(target, nodes) {
    if (!target) { return; }
    target.textContent = "";
    for (var i = 0; i < nodes.length; i++) {
      target.appendChild(typeof nodes[i] === "string" ? document.createTextNode(nodes[i]) : nodes[i]);
    }
  }

  var api = window.paytwiceAPI; // static/api.js

  function refusal(res) {
    if (res.status === 403) { return window.paytwiceNotPresenter(); }
    return "Refused (" + (res.status || "no answer") + "): " + ((res.body && (res.body.detail || res.body.title)) || "error");
  }

  function uuid() {
    var b = new Uint8Array(16);
    crypto.getRandomValues(b);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    var h = Array.prototype.map.call(b, function (x) { return (x + 0x100).toString(16).slice(1); }).join("");
    return h.slice(0, 8) + "-" + h.slice(8, 12) + "-" + h.slice(12, 16) + "-" + h.slice(16, 20) + "-" + h.slice(20);
  }

  // ------------------------------------------------------------- refresh

  var timer = null;
  var busy = false;
  // The room's version this page has seen ("new" until the first answer).
  var roomVersion = "new";
  var again = false;
  // resync is set by a frame that drew the whole room again (the server
  // restarted, or the page fell behind): the versions the page holds
  // are of another life of the server, so the next ask is for everything.
  var resync = false;

  function query() {
    var q = [];
    var lab = $("lab");
    var lesson = $("lesson");
    if (lab) { q.push("s=" + lab.dataset.vSettings); }
    if (lesson) {
      q.push("l=" + lesson.dataset.vLesson);
      if (lesson.classList.contains("lesson-board")) { q.push("board=1"); }
    }
    var card = $("checkout");
    if (card) { q.push("r=" + card.dataset.roomEpoch, "b=" + (card.dataset.roomBooks || "0")); }
    if (q.length) { q.push("c=" + (resync ? "new" : roomVersion)); }
    if (q.length && resync) { q.push("all=1"); }
    return q.join("&");
  }

  // showAsking marks the page (data-lab-asking on <html>) while an ask
  // is scheduled or under way, so that whoever watches the page can tell
  // when it has stopped asking.
  function showAsking() {
    document.documentElement.toggleAttribute("data-lab-asking", timer !== null || busy);
  }

  function refresh() {
    timer = null;
    var q = query();
    if (!q) { showAsking(); return; }
    if (busy) { again = true; return; }
    busy = true;
    showAsking();
    var asked = resync;
    fetch("/lab/live?" + q, { credentials: "same-origin", cache: "no-store", headers: { "Accept": "application/json" } })
      .then(function (r) { return r.status === 200 ? r.json() : null; })
      .then(function (data) {
        // Asked for everything, and answered: the page is the room's now.
        if (asked && data) { resync = false; }
        apply(data, asked);
      }, function () { /* the next frame asks again */ })
      .finally(function () {
        busy = false;
        if (again) { again = false; schedule(); }
        showAsking();
      });
  }

  // A frame that changed the room asks; several in a row ask once.
  function roomChanged(ev) {
    var data = ev.detail && ev.detail.data;
    if (typeof data !== "string") { return; }
    if (data.indexOf("<!--resync-->") >= 0) {
      resync = true;
      noteShown();
    }
    if (data.indexOf("<!--room-->") >= 0) { schedule(); }
  }

  // The note a resync draws ("the server restarted; the class is in
  // chapter N") stays a few seconds, then goes.
  var noteTimer = null;
  function noteShown() {
    clearTimeout(noteTimer);
    noteTimer = setTimeout(function () {
      var n = $("stream-note");
      if (n) { n.hidden = true; }
    }, 15000);
  }

  function schedule() {
    clearTimeout(timer);
    timer = setTimeout(refresh, 120);
    showAsking();
  }

  // discardEdits is set when the server refused a change: the next redraw
  // shows the switches as the server has them, not as they were clicked.
  var discardEdits = false;

  // apply draws what /lab/live answered; whole says the page asked for
  // everything after a resync, and the checkout card checks its order
  // against the server even if no version moved.
  function apply(data, whole) {
    if (!data) { return; }
    var keep = !discardEdits;
    discardEdits = false;
    var focused = document.activeElement && document.activeElement.id;
    var lessonChanged = false;
    Object.keys(data.html).forEach(function (id) {
      var old = $(id);
      if (!old) { return; }
      var t = document.createElement("template");
      t.innerHTML = data.html[id].trim();
      var fresh = t.content.firstElementChild;
      if (!fresh) { return; }
      if (id !== "lesson") {
        // The lab's switches and numbers change in place (see morph).
        window.paytwiceMorph(old, fresh, keep);
        return;
      }
      lessonChanged = true;
      // Keep the chapter list open if it was.
      var idx = old.querySelector(".lesson-index");
      if (idx && idx.open) { fresh.querySelector(".lesson-index").open = true; }
      if (old.dataset.slug === fresh.dataset.slug) { keepResults(old, fresh); }
      old.replaceWith(fresh);
    });
    if (focused && $(focused) && document.activeElement !== $(focused)) { $(focused).focus(); }
    var lab = $("lab");
    if (lab && data.v.s !== undefined) { lab.dataset.vSettings = String(data.v.s); }
    if (lab && data.v.o !== undefined) { lab.dataset.vOutcomes = String(data.v.o); }
    var lesson = $("lesson");
    if (lesson && data.v.l !== undefined) { lesson.dataset.vLesson = String(data.v.l); }
    if (lessonChanged) { lessonStarted(); }
    // A resync's note says which chapter the class was in when it was
    // drawn; once the page shows another (the presenter moved on within
    // the note's few seconds), it would say what is no longer so.
    var note = $("stream-note");
    if (note && !note.hidden && lesson && note.dataset.lesson !== undefined && note.dataset.lesson !== (lesson.dataset.slug || "")) {
      note.hidden = true;
    }
    // The checkout card (pay.js) follows the room: a new order after a
    // reset, a check of what it says after any change.
    // The demo clock, for the key ages (pay.js).
    if (data.now) { document.dispatchEvent(new CustomEvent("paytwice:clock", { detail: { now: data.now } })); }
    var changed = data.v.c !== undefined && roomVersion !== String(data.v.c);
    if (data.v.c !== undefined) { roomVersion = String(data.v.c); }
    var card = $("checkout");
    if (card && data.v.r !== undefined) {
      // Other books (the class moved to another database) are no reset.
      var books = data.v.b !== undefined ? String(data.v.b) : card.dataset.roomBooks;
      var moved = books !== card.dataset.roomBooks;
      var reset = !moved && card.dataset.roomEpoch !== String(data.v.r);
      card.dataset.roomEpoch = String(data.v.r);
      card.dataset.roomBooks = books;
      if (reset || moved || changed || whole) {
        document.dispatchEvent(new CustomEvent("paytwice:room", { detail: { reset: reset, moved: moved, epoch: String(data.v.r), books: books } }));
      }
    }
  }

  // keepResults moves the answers shown under a chapter's buttons into
  // the chapter's panel drawn again: a "Watch for" item the answer itself
  // ticked redraws the panel, and the presenter would otherwise see the
  // answer vanish as soon as it appeared.
  function keepResults(old, fresh) {
    old.querySelectorAll(".lab-result").forEach(function (r) {
      if (!r.childNodes.length) { return; }
      var twin = r.id ? fresh.querySelector("#" + CSS.escape(r.id)) : null;
      if (!twin) {
        var btn = r.parentElement.querySelector("[data-lab-action]");
        var fb = btn && fresh.querySelector('[data-lab-action="' + btn.dataset.labAction + '"]');
        twin = fb && fb.parentElement.querySelector(".lab-result");
      }
      if (twin && !twin.childNodes.length) {
        while (r.firstChild) { twin.appendChild(r.firstChild); }
      }
    });
  }

  // When the class moves to a chapter, this page follows: it drops a
  // ?lesson= link from the address and sets automatic retries as the
  // chapter wants them.
  function lessonStarted() {
    var lesson = $("lesson");
    if (!lesson) { return; }
    foldForPhones();
    if (/[?&]lesson=/.test(location.search)) {
      history.replaceState(null, "", location.pathname);
    }
    var retry = lesson.dataset.retry;
    var box = $("opt-retry");
    if (box && (retry === "on" || retry === "off") && box.checked !== (retry === "on")) {
      box.checked = retry === "on";
      box.dispatchEvent(new Event("change", { bubbles: true }));
    }
  }

  // On a phone the chapter's "switched on" and "why" start folded, so
  // what to do and the Pay button come first.
  function foldForPhones() {
    if (!window.matchMedia || !window.matchMedia("(max-width: 600px)").matches) { return; }
    var folds = document.querySelectorAll("#lesson .lesson-fold");
    for (var i = 0; i < folds.length; i++) { folds[i].open = false; }
  }

  // -------------------------------------------------------------- actions

  function randomOrder(prefix) {
    var b = new Uint16Array(1);
    crypto.getRandomValues(b);
    return prefix + "-" + (1000 + (b[0] % 9000));
  }

  // A burst: many requests with one new key at once, as a flaky network
  // or an impatient client might send them.
  function burst(btn) {
    var n = parseInt(btn.dataset.arg || "10", 10) || 10;
    var key = uuid();
    var order = randomOrder("B");
    var body = JSON.stringify({ order_id: order, amount_satang: 129900 });
    var sent = [];
    for (var i = 0; i < n; i++) {
      sent.push(fetch("/v1/payments", {
        method: "POST", credentials: "same-origin", cache: "no-store",
        headers: { "Content-Type": "application/json", "Accept": "application/json", "Idempotency-Key": key },
        body: body,
      }).then(function (r) { return r.status; }, function () { return 0; }));
    }
    return Promise.all(sent).then(function (codes) {
      var counts = {};
      codes.forEach(function (c) { counts[c] = (counts[c] || 0) + 1; });
      var parts = Object.keys(counts).sort().map(function (c) { return (c === "0" ? "no answer" : c) + " \u00d7" + counts[c]; });
      var answers = n + " requests answered " + parts.join(", ");
      // The answers say what the requests were told; the charges are what
      // the server did. The card counts the charges, from the look-up.
      return lookUpOrder(order).then(function (found) {
        if (!found) {
          return { ok: true, tone: "warn", text: "Order " + order + ", one key: " + answers + ". The look-up failed, so how many times it was charged is unknown." };
        }
        var charged = found.charges.length;
        var text = "Order " + order + ", one key: charged " + timesWord(charged) + " (GET /v1/payments?order_id=" + order + ")." +
          " The " + answers + ".";
        if (found.state === "pending") {
          text += " A request with the key has not finished yet: the count may still grow.";
        }
        return { ok: true, tone: charged > 1 ? "bad" : (charged === 1 ? "ok" : "warn"), text: text, charges: charged };
      });
    });
  }

  var TIMES = ["never", "once", "twice"];
  function timesWord(n) { return TIMES[n] || n + " times"; }

  // lookUpOrder asks the server what it has for an order (the caller's
  // scope), without counting as a client's reconciliation; null when the
  // look-up failed.
  function lookUpOrder(order) {
    return fetch("/v1/payments?order_id=" + encodeURIComponent(order), {
      credentials: "same-origin", cache: "no-store", headers: { "Accept": "application/json", "Paytwice-Card-Check": "1" },
    }).then(function (r) { return r.ok ? r.json() : null; }, function () { return null; }).then(function (b) {
      return b && Array.isArray(b.charges) ? b : null;
    });
  }

  function chain(first, second) {
    return function (btn) {
      return first(btn).then(function (res) { return res.ok ? second(btn) : res; });
    };
  }

  // A payment with no Idempotency-Key header at all: the real server
  // refuses it with a 400 before anything is saved (the lab's no-key mode
  // runs it instead).
  function sendNoKey() {
    var order = randomOrder("N");
    return fetch("/v1/payments", {
      method: "POST", credentials: "same-origin", cache: "no-store",
      headers: { "Content-Type": "application/json", "Accept": "application/json" },
      body: JSON.stringify({ order_id: order, amount_satang: 129900 }),
    }).then(function (r) {
      return r.json().catch(function () { return {}; }).then(function (b) {
        var text = "Order " + order + ", no key: " + r.status + (b.title ? " " + b.title : "") + (b.detail ? ". " + b.detail : "");
        return { ok: true, tone: r.status === 400 ? "ok" : "bad", text: text };
      });
    }, function () { return { ok: false, status: 0, body: { detail: "no answer" } }; });
  }

  var actions = {
    "send-no-key": sendNoKey,
    "burst": burst,
    "faults-off": function () { return api("PUT", "/api/faults", {}); },
    "warp-sweep": chain(
      function (btn) { return api("POST", "/api/clock/advance", { seconds: parseInt(btn.dataset.arg, 10) }); },
      function () { return api("POST", "/api/sweep"); }),
    "warp-prune": chain(
      function (btn) { return api("POST", "/api/clock/advance", { seconds: parseInt(btn.dataset.arg || "120", 10) }); },
      function () { return api("POST", "/api/lab/prune"); }),
    "lab-patch": function (btn) { return api("PATCH", "/api/lab", JSON.parse(btn.dataset.arg)); },
    "pay-other-amount": function () {
      var amount = $("amount");
      var pay = $("pay");
      if (!amount || !pay) { return Promise.resolve({ ok: false, body: { detail: "open the checkout page to pay" } }); }
      var v = parseFloat(String(amount.value).replace(/[^0-9.]/g, "")) || 1299;
      amount.value = (Math.round(v * 100 + 100) / 100).toFixed(2);
      amount.dispatchEvent(new Event("input", { bubbles: true }));
      pay.click();
      return Promise.resolve({ ok: true, text: "Paid again with the same key and another amount." });
    },
    "new-order": function () {
      var b = $("new-order");
      if (b) { b.click(); }
      return Promise.resolve({ ok: !!b, text: "New order, new key.", body: { detail: "open the checkout page" } });
    },
  };

  // sweptWords says what a sweep closed (POST /api/sweep): this sweep's
  // keys, and every key any sweep closed in the room since its last
  // reset, the periodic sweeper's included: it may have closed a key
  // before the button's sweep ran.
  function sweptWords(b) {
    var mine = (b.closed && b.closed.length) || 0;
    var room = typeof b.closed_in_room === "number" ? b.closed_in_room : mine;
    return "this sweep closed " + mine + " stuck key" + (mine === 1 ? "" : "s") + "; sweeps have closed " + room +
      " in this room since the last reset (the sweeper that runs by itself included).";
  }

  function describeAction(id, res) {
    if (res.text) { return res.text; }
    var b = res.body || {};
    switch (id) {
      case "warp-sweep": return "Clock warped; " + sweptWords(b);
      case "warp-prune": return "Clock warped " + (b.now ? "to " + b.now.slice(11, 19) + " UTC" : "") + "; " + b.pruned + " key(s) older than " + b.retention_seconds + " s pruned.";
      case "faults-off": return "Every fault switch is off.";
      case "lab-patch": return "Saved: every page follows.";
    }
    return "Done.";
  }

  function runAction(btn) {
    var id = btn.dataset.labAction;
    var fn = actions[id];
    if (!fn) { return; }
    var out = btn.parentElement.querySelector(".lab-result");
    say(out, [badge("working", "mute")]);
    btn.disabled = true;
    fn(btn).then(function (res) {
      var target = current(out, '[data-lab-action="' + id + '"]');
      if (res.ok) {
        say(target, [badge("done", res.tone || "ok"), " " + describeAction(id, res)]);
      } else {
        say(target, [badge(String(res.status || "error"), "bad"), " " + refusal(res)]);
      }
    }).finally(function () { btn.disabled = false; });
  }

  // current finds where an answer goes once it is back: the panel may
  // have been redrawn meanwhile (a lesson panel is replaced whole), and
  // an answer written into the old one would never be seen. It is the
  // same element if it is still on the page, else the one with its id,
  // else the result line next to the button sel.
  function current(out, sel) {
    if (!out || out.isConnected) { return out; }
    if (out.id && $(out.id)) { return $(out.id); }
    var btn = document.querySelector(sel);
    return (btn && btn.parentElement.querySelector(".lab-result")) || null;
  }

  // ------------------------------------------------------------- switches

  function labStatus(nodes) { say($("lab-status"), nodes); }

  function patchLab(patch) {
    labStatus([badge("saving", "mute")]);
    return api("PATCH", "/api/lab", patch).then(function (res) {
      if (res.ok) {
        labStatus([badge("saved", "ok"), " Every open page follows."]);
      } else {
        labStatus([badge(String(res.status || "error"), "bad"), " " + refusal(res)]);
        var lab = $("lab");
        if (lab) { lab.dataset.vSettings = "0"; } // redraw the switches as the server has them
        discardEdits = true;
      }
      schedule();
    });
  }

  function onChange(ev) {
    var t = ev.target;
    if (!t || !t.matches) { return; }
    if (t.matches("[data-lab-mode]")) {
      patchLab({ server: { mode: t.checked ? t.dataset.labMode : "correct" } });
      return;
    }
    if (t.matches("[data-lab]")) {
      var path = t.dataset.lab.split(".");
      var value = t.type === "checkbox" ? t.checked : (/^\d+$/.test(t.value) ? parseInt(t.value, 10) : t.value);
      var patch = {};
      patch[path[0]] = {};
      patch[path[0]][path[1]] = value;
      patchLab(patch);
    }
  }

  // --------------------------------------------------------------- lessons

  function goLesson(btn) {
    var slug = btn.dataset.lessonGo;
    var out = $("lesson-status");
    say(out, [badge("setting up", "mute"), slug ? " Resetting and setting the chapter's switches\u2026" : " Leaving the lessons\u2026"]);
    btn.disabled = true;
    api("PUT", "/api/lessons/current", { slug: slug }).then(function (res) {
      if (!res.ok) {
        btn.disabled = false;
        say(current(out, "#lesson-status"), [badge(String(res.status || "error"), "bad"), " " + refusal(res)]);
        return;
      }
      schedule();
    });
  }

  function onClick(ev) {
    var t = ev.target && ev.target.closest ? ev.target.closest("button") : null;
    if (!t || t.disabled) { return; }
    if (t.hasAttribute("data-lesson-go")) {
      goLesson(t);
    } else if (t.hasAttribute("data-lab-action")) {
      runAction(t);
    }
  }

  // ----------------------------------------------------------------- start

  function start() {
    document.addEventListener("htmx:sseMessage", roomChanged);
    document.addEventListener("htmx:sseOpen", schedule);
    document.addEventListener("change", onChange);
    document.addEventListener("click", onClick);
    var email = $("lab-email");
    if (email) {
      try { email.value = localStorage.getItem(EMAIL_KEY) || email.value; } catch (e) { /* private mode */ }
      email.addEventListener("input", function () {
        try { localStorage.setItem(EMAIL_KEY, email.value); } catch (e) { /* private mode */ }
      });
    }
    var lesson = $("lesson");
    if (lesson && lesson.dataset.running === "true") { lessonStarted(); } else { foldForPhones(); }
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();

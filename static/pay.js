// pay.js: paytwice's small browser client.
//
// - The Pay button sends a request on every click, at once: a double-click
//   is two concurrent requests, as it is with a real checkout that has no
//   guard. "Guard the button" disables it while a request is in flight.
// - One idempotency key per action (an order), kept in localStorage so a
//   reload keeps it, sent on every click and every retry of that order.
// - "Retry automatically" retries network errors, 409, 429 and 5xx with
//   full jitter: wait uniform(0, min(cap, base * 2^n)), never less than
//   Retry-After, at most five times. 400 and 422 are never retried.
// - The fault switches call the JSON API (/api/faults, /api/sweep,
//   /api/reset); the presenter's cookie goes with them.
// - After a final 500 the page looks the order up (GET /v1/payments?
//   order_id=) before anything else: the charge may have happened.
// - The common-mistakes lab (lab.js keeps its switches on the page) can
//   make this client misbehave on purpose: a new key for every retry,
//   retrying 400 and 422, a new key after a 500, the customer's e-mail as
//   the key. Each is marked "the mistake, on purpose" below.
// - The live panels are htmx + the SSE extension; this file only makes a
//   reconnect resume after the last event it saw, and keeps ages current.
(function () {
  "use strict";

  var ACTION_KEY = "paytwice.action.v1";
  var OPTIONS_KEY = "paytwice.options.v1";
  var ATTEMPT_TIMEOUT_MS = 10000;
  var HELD_POLL_MS = 250;

  function $(id) { return document.getElementById(id); }

  function store(name, value) {
    try { localStorage.setItem(name, JSON.stringify(value)); } catch (e) { /* private mode: keep it in memory */ }
  }
  function load(name) {
    try { return JSON.parse(localStorage.getItem(name) || "null"); } catch (e) { return null; }
  }

  // A version 4 UUID from crypto.getRandomValues, which (unlike
  // crypto.randomUUID) also works on a plain-http classroom address.
  function uuid() {
    var b = new Uint8Array(16);
    crypto.getRandomValues(b);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    var h = Array.prototype.map.call(b, function (x) { return (x + 0x100).toString(16).slice(1); }).join("");
    return h.slice(0, 8) + "-" + h.slice(8, 12) + "-" + h.slice(12, 16) + "-" + h.slice(16, 20) + "-" + h.slice(20);
  }

  function newOrderID() {
    var b = new Uint16Array(1);
    crypto.getRandomValues(b);
    return "A-" + (1000 + (b[0] % 9000));
  }

  function shortKey(k) { return k.length <= 10 ? k : k.slice(0, 8) + "\u2026"; }

  // Money never becomes a float: "1,299.50" → 129950 by string arithmetic.
  function parseBaht(text) {
    var t = String(text).replace(/[\s,\u0e3f]/g, "");
    var m = /^(\d{1,9})(?:\.(\d{0,2}))?$/.exec(t);
    if (!m) { return null; }
    var satang = parseInt(m[1], 10) * 100 + parseInt(((m[2] || "") + "00").slice(0, 2), 10);
    return satang > 0 ? satang : null;
  }
  function formatBaht(satang) {
    var whole = String(Math.floor(satang / 100)).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
    return whole + "." + String(satang % 100 + 100).slice(1);
  }

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) { e.className = cls; }
    if (text !== undefined) { e.textContent = text; }
    return e;
  }
  function badge(text, tone) { return el("span", "badge " + tone, text); }
  function link(href, text) { var a = el("a", "", text); a.href = href; return a; }

  // ---------------------------------------------------------------- live

  var lastEventID = null;

  // An event id is "<epoch>-<seq>" (web/live): the epoch names one life of
  // the server, and numbers start again at 1 in each. Within one life a
  // larger number is newer; an id of another life is another server's or
  // the server's new life, which goes on from the page's place in the
  // room's order ("@N.I.J.G" after the number, on a cluster: G is the
  // order's generation, and absent from an earlier server's "@N.I.J") or
  // starts with a frame that draws the whole room again.
  function parseID(id) {
    var m = /^(?:([0-9a-f]{1,32})-)?(\d+)(?:@\d+\.\d+\.\d+(?:\.\d+)?)?$/.exec(String(id || ""));
    return m ? { e: m[1] || "", n: parseInt(m[2], 10) } : { e: "", n: 0 };
  }
  function newerID(a, b) {
    var x = parseID(a), y = parseID(b);
    return x.e !== y.e || x.n > y.n;
  }
  var clockSkew = 0; // server clock minus this browser's clock, in ms

  function setStreamState(text, tone) {
    var s = $("stream-state");
    if (!s) { return; }
    s.textContent = "";
    s.appendChild(badge(text, tone));
  }

  if (window.htmx) {
    window.htmx.createEventSource = function (url) {
      if (lastEventID !== null) {
        url = url.replace(/([?&]since=)[^&]*/, "$1" + encodeURIComponent(lastEventID));
      }
      if (typeof BroadcastChannel !== "function") { return ownSource(url); }
      return sharedSource(url);
    };
  }

  // ownSource is a plain EventSource. A reconnect after a failure makes a
  // new one, which would not send Last-Event-ID: the caller puts the last
  // id seen into ?since= instead.
  function ownSource(url) {
    var es = new EventSource(url, { withCredentials: true });
    es.addEventListener("frame", function (e) {
      if (e.lastEventId) { lastEventID = e.lastEventId; }
    });
    es.addEventListener("open", function () { setStreamState("live", "ok"); });
    es.addEventListener("error", function () { setStreamState("reconnecting", "warn"); });
    return es;
  }

  // One event stream per browser, shared by its tabs. A browser opens at
  // most six connections to one host over HTTP/1.1, and every live page
  // holds one stream open, so a seventh tab would never load. Instead one
  // tab (the leader) holds the stream and passes every frame to the others
  // over a BroadcastChannel; a tab that opens asks the leader for the
  // frames after its own snapshot. When the leader goes, another tab takes
  // over and resumes from the last frame it saw. Two leaders at once (a
  // race, or a tab waking up) settle it: the smaller id stays leader.
  function sharedSource(url) {
    var src = {
      url: url, withCredentials: true, readyState: 0, onopen: null, onerror: null, onmessage: null, listeners: {},
      addEventListener: function (type, fn) { (this.listeners[type] = this.listeners[type] || []).push(fn); },
      removeEventListener: function (type, fn) {
        var l = this.listeners[type] || [];
        var i = l.indexOf(fn);
        if (i >= 0) { l.splice(i, 1); }
      },
      dispatch: function (type, ev) {
        if (typeof this["on" + type] === "function") { this["on" + type](ev); }
        var l = (this.listeners[type] || []).slice();
        for (var i = 0; i < l.length; i++) { l[i].call(this, ev); }
      },
      close: function () { this.readyState = 2; stop(); },
    };
    var RING = 300;
    var me = uuid();
    var role = "starting"; // then "leader", "follower", or "solo" (its own stream, after a gap)
    var leader = null;
    var m = /[?&]since=([^&]*)/.exec(url);
    var since = m ? decodeURIComponent(m[1]) : "";
    var real = null, ring = [], coverFrom = "";
    var heard = Date.now(), pinged = 0;
    var channel = new BroadcastChannel("paytwice-events");

    function post(msg) { msg.from = me; channel.postMessage(msg); }
    // The badge says which tab holds the stream (and tests look).
    function setRole(r) {
      role = r;
      var s = $("stream-state");
      if (s) { s.setAttribute("data-role", r); }
    }
    function withSince(u) { return u.replace(/([?&]since=)[^&]*/, "$1" + encodeURIComponent(since)); }

    // Each (re)connection is an "open" for htmx (htmx:sseOpen), after
    // which lab.js asks for whatever changed while the page was away.
    function open() {
      if (src.readyState !== 1) { src.readyState = 1; src.dispatch("open", new Event("open")); }
      setStreamState("live", "ok");
    }
    function lost() {
      if (src.readyState === 1) { src.readyState = 0; }
      setStreamState("reconnecting", "warn");
    }

    // A frame whose id was seen is dropped, unless it is a refresh (the
    // lab's numbers, busy totals), which shares the id of the frame before
    // it and sets what it shows whole. A frame of another life of the
    // server is taken: its first draws the whole room again.
    function deliver(f) {
      if (!newerID(f.id, since) && !(f.id === since && f.data.indexOf("<!--refresh-->") >= 0)) { return; }
      since = f.id;
      lastEventID = f.id;
      src.dispatch("frame", new MessageEvent("frame", { data: f.data, lastEventId: String(f.id) }));
    }

    function connect(share) {
      if (real) { real.close(); }
      real = new EventSource(withSince(url), { withCredentials: true });
      real.addEventListener("open", function () {
        open();
        if (share && role === "leader") { post({ t: "state", live: true }); }
      });
      real.addEventListener("error", function () {
        lost();
        // The other tabs' badges say so too: their frames come from here.
        if (share && role === "leader") { post({ t: "state", live: false }); }
        if (real && real.readyState === 2) { setTimeout(function () { if (role === "leader" || role === "solo") { connect(role === "leader"); } }, 1000); }
      });
      real.addEventListener("frame", function (e) {
        var f = { id: e.lastEventId || "", data: e.data };
        if (share && role === "leader") {
          if (ring.length && parseID(ring[ring.length - 1].id).e !== parseID(f.id).e) {
            // The server's new life: what the ring held is of the old one.
            ring = [];
            coverFrom = "";
          }
          ring.push(f);
          if (ring.length > RING) { coverFrom = ring.shift().id; }
          post({ t: "frame", frame: f });
        }
        deliver(f);
      });
    }

    // covers reports whether the ring holds every frame a tab at id
    // lacks: when it starts with a frame that draws the whole room again,
    // always; else within one life, from coverFrom on.
    function covers(id) {
      if (ring.length > 0 && ring[0].data.indexOf("<!--resync-->") >= 0) { return true; }
      var p = parseID(id), c = parseID(coverFrom);
      return coverFrom !== "" && p.e === c.e && p.n >= c.n;
    }

    function lead() {
      setRole("leader");
      leader = me;
      ring = [];
      coverFrom = since;
      connect(true);
      post({ t: "leader" });
    }

    function follow(from) {
      if (real) { real.close(); real = null; }
      setRole("follower");
      leader = from;
      heard = Date.now();
      open();
    }

    channel.onmessage = function (ev) {
      var msg = ev.data || {};
      if (msg.from === me) { return; }
      switch (msg.t) {
      case "hello":
        if (role === "leader") {
          post({ t: "replay", to: msg.from, gap: !covers(msg.since), live: !!real && real.readyState === 1,
            frames: ring.filter(function (f) { return newerID(f.id, msg.since); }) });
        }
        break;
      case "replay":
        if (msg.to !== me || role !== "starting") { break; }
        if (msg.gap) {
          // The leader no longer holds what this page missed: stream alone.
          setRole("solo");
          connect(false);
          break;
        }
        follow(msg.from);
        if (msg.live === false) { lost(); }
        msg.frames.forEach(deliver);
        break;
      case "frame":
        if (role === "leader" && msg.from < me) { follow(msg.from); }
        if (role === "follower") {
          heard = Date.now();
          leader = msg.from;
          deliver(msg.frame);
        }
        break;
      case "leader":
      case "pong":
        if (role === "leader" && msg.from < me) { follow(msg.from); }
        if (role === "follower") { heard = Date.now(); leader = msg.from; }
        if (role === "starting" && msg.t === "leader") { post({ t: "hello", since: since }); }
        break;
      case "ping":
        if (role === "leader") { post({ t: "pong", live: !!real && real.readyState === 1 }); }
        break;
      case "state":
        if (role === "follower" && msg.from === leader) {
          heard = Date.now();
          if (msg.live) { open(); } else { lost(); }
        }
        break;
      case "bye":
        if (role === "follower" && msg.from === leader) {
          var left = Date.now();
          setTimeout(function () { if (role === "follower" && heard <= left) { lead(); } }, Math.random() * 300);
        }
        break;
      }
    };

    // A follower that has heard nothing for a while asks; no answer
    // means the leader is gone.
    var timer = setInterval(function () {
      if (role !== "follower") { return; }
      var now = Date.now();
      if (now - heard > 3000 && pinged <= heard) {
        pinged = now;
        post({ t: "ping" });
      } else if (pinged > heard && now - pinged > 1500) {
        lead();
      }
    }, 1000);

    function bye() { if (role === "leader") { post({ t: "bye" }); } }
    window.addEventListener("pagehide", bye);

    function stop() {
      bye();
      clearInterval(timer);
      window.removeEventListener("pagehide", bye);
      if (real) { real.close(); real = null; }
      channel.close();
      role = "closed";
    }

    post({ t: "hello", since: since });
    setTimeout(function () { if (role === "starting") { lead(); } }, 300);
    return src;
  }

  function formatAge(ms) {
    var s = Math.floor(ms / 1000);
    if (s < 1) { return "now"; }
    if (s < 60) { return s + " s"; }
    if (s < 3600) { return Math.floor(s / 60) + " min"; }
    if (s < 48 * 3600) { return Math.floor(s / 3600) + " h"; }
    return Math.floor(s / 86400) + " d";
  }

  function tickAges() {
    var now = Date.now() + clockSkew;
    var ages = document.querySelectorAll("time.age[data-t]");
    for (var i = 0; i < ages.length; i++) {
      var t = parseInt(ages[i].getAttribute("data-t"), 10);
      var text = formatAge(now - t);
      if (ages[i].textContent !== text) { ages[i].textContent = text; }
    }
  }

  // ------------------------------------------------------------ checkout

  // roomNow is the room's clock: the server's, with the presenter's
  // advances (lab.js passes each one on as "paytwice:clock").
  function roomNow() { return Date.now() + clockSkew; }

  var TIMES = ["never", "once", "twice", "three times", "four times", "five times", "six times", "seven times", "eight times", "nine times", "ten times"];
  function times(n) { return TIMES[n] || n + " times"; }
  function plural(n, one, many) { return n + " " + (n === 1 ? one : many); }
  function secondsText(ms) { return plural(Math.max(0, Math.ceil(ms / 1000)), "second", "seconds"); }

  function initCheckout(card) {
    function num(name, dflt) {
      var v = parseInt(card.getAttribute(name), 10);
      return isNaN(v) ? dflt : v;
    }
    var cfg = {
      base: num("data-backoff-base-ms", 500) || 500,
      cap: num("data-backoff-cap-ms", 8000) || 8000,
      retries: num("data-max-retries", 5),
      lockMS: num("data-lock-timeout-ms", 30000),
      sweepMS: num("data-sweep-every-ms", 5000),
      attemptMS: num("data-attempt-timeout-ms", ATTEMPT_TIMEOUT_MS) || ATTEMPT_TIMEOUT_MS,
      session: card.getAttribute("data-session") || "",
      defaultAmount: num("data-amount", 129900),
    };
    function roomEpoch() { return card.getAttribute("data-room-epoch") || "0"; }
    function roomBooks() { return card.getAttribute("data-room-books") || "0"; }

    // An order is one action: its key (keys, when a mistake changed it),
    // its clicks and a row for every request sent for it. It is kept in
    // localStorage, so a reload shows what was sent and carries on.
    // An order belongs to the room's epoch it began in: a reset (every
    // chapter starts with one) clears the server's keys and charges, so
    // an order from before it is closed and the page starts a new one.
    function freshOrder(orderId, amount, key) {
      return { orderId: orderId, amount: amount, key: key, keys: [key], firstSent: {}, clicks: 0, rows: [], paid: null, epoch: roomEpoch(), books: roomBooks() };
    }
    var action = load(ACTION_KEY);
    var closed = null; // the order a reset closed, to say so on the card
    var movedFrom = null; // the order kept from other books (another database)
    if (action && action.books && action.books !== roomBooks()) {
      movedFrom = action;
      action = null;
    } else if (action && action.epoch !== roomEpoch()) {
      closed = action;
      action = null;
    }
    if (!action || !action.key || !action.orderId || !(action.amount > 0)) {
      action = freshOrder(card.getAttribute("data-order-id"), cfg.defaultAmount, card.getAttribute("data-key"));
    }
    action.keys = action.keys || [action.key];
    action.firstSent = action.firstSent || {};
    action.rows = Array.isArray(action.rows) ? action.rows : [];
    action.clicks = action.clicks || 0;
    action.paid = action.paid || null;
    // What this page is doing for the current order right now: requests
    // in flight, clicks the guard blocked, the sweeper countdown. New
    // order stops it, so an old order's retries never continue.
    function freshRun() { return { inflight: 0, blocked: 0, stopped: false, timer: null }; }
    var run = freshRun();
    var opts = load(OPTIONS_KEY) || { guard: false, retry: false, newKey: false };

    var pay = $("pay"), amount = $("amount"), attempts = $("attempts"), status = $("pay-status"), explain = $("pay-explain");

    function save() { store(ACTION_KEY, action); }

    function drawAction() {
      $("order-id").textContent = action.orderId;
      $("board-order").textContent = action.orderId;
      $("key-full").textContent = action.key;
      $("key-short").textContent = shortKey(action.key);
      $("pay-amount").textContent = formatBaht(action.amount);
      $("amount-satang").textContent = String(action.amount);
      if (parseBaht(amount.value) !== action.amount) { amount.value = formatBaht(action.amount); }
    }

    // The guard does not disable the button (a disabled button swallows
    // the click without a trace): it refuses the click and counts it.
    function drawGuard() {
      pay.setAttribute("aria-disabled", opts.guard && run.inflight > 0 ? "true" : "false");
      pay.setAttribute("aria-busy", run.inflight > 0 ? "true" : "false");
    }

    function append(parent, nodes) {
      for (var i = 0; i < nodes.length; i++) {
        parent.appendChild(typeof nodes[i] === "string" ? document.createTextNode(nodes[i]) : nodes[i]);
      }
    }
    // setStatus draws the card's status. charges is how many charges it
    // says the order has, when it says so (reconcile checks that number
    // with the server); omitted, the status states no count.
    function setStatus(state, nodes, charges) {
      stopTimer();
      status.setAttribute("data-state", state);
      if (charges === undefined) { status.removeAttribute("data-charges"); } else { status.setAttribute("data-charges", String(charges)); }
      status.textContent = "";
      append(status, nodes);
    }
    function setExplain(nodes) {
      explain.textContent = "";
      if (!nodes) { explain.hidden = true; return; }
      explain.hidden = false;
      append(explain, nodes);
    }
    function stopTimer() {
      if (run.timer) { clearInterval(run.timer); run.timer = null; }
    }

    function drawPaid(note) {
      var p = action.paid;
      setStatus("paid", [badge("paid", "ok"), " Paid \u0e3f" + formatBaht(p.amount) + " for order " + action.orderId + ". Charge ",
        el("code", "", p.charge || "?"), "." + (note ? " " + note : "")], 1);
    }

    function drawSending(note) {
      var n = run.inflight;
      var nodes = [badge("sending", "info"), n > 1 ? " " + n + " requests for this order are on their way; no answer yet." :
        " A request for this order is on its way; no answer yet."];
      if (run.blocked) {
        nodes.push(" The guard blocked " + plural(run.blocked, "more click", "more clicks") + ": nothing was sent for " + (run.blocked === 1 ? "it." : "them."));
      }
      if (note) { nodes = nodes.concat(note); }
      setStatus("sending", nodes);
    }

    // ---- the rows: one per request (and per blocked click and look-up)

    function rowLabel(r) {
      if (r.kind === "reconcile") { return (r.click ? "click " + r.click + " \u00b7 " : "") + "look-up"; }
      return "click " + r.click + (r.label ? " \u00b7 " + r.label : "") + (r.attempt > 0 ? " \u00b7 retry " + r.attempt : "");
    }

    function paint(r) {
      var li = r.li;
      if (!li) {
        li = el("li");
        // Not enumerable: JSON.stringify leaves the element out.
        Object.defineProperty(r, "li", { value: li, writable: true });
      }
      li.className = "attempt" + (r.kind !== "send" ? " " + r.kind : "");
      li.textContent = "";
      if (r.kind !== "send") { li.setAttribute("data-kind", r.kind); }
      if (r.status) { li.setAttribute("data-status", r.status); }
      if (r.key) { li.setAttribute("data-key", r.key); }
      if (r.paid) { li.setAttribute("data-paid", r.paid); }
      if (r.wasted) { li.setAttribute("data-wasted", "true"); }
      li.appendChild(el("span", "who", rowLabel(r)));
      var what = el("span", "what", " ");
      if (r.badge) {
        what.appendChild(badge(r.badge, r.tone));
        what.appendChild(document.createTextNode(" " + (r.words || "")));
      } else {
        what.appendChild(document.createTextNode(r.words || "sending\u2026"));
      }
      if (r.wasted) {
        what.appendChild(document.createTextNode(" "));
        what.appendChild(badge("wasted", "bad"));
      }
      li.appendChild(what);
      if (r.wait) { li.appendChild(el("span", "wait", " \u2192 " + r.wait)); }
      return li;
    }

    function addRow(ord, r) {
      r.kind = r.kind || "send";
      ord.rows.unshift(r);
      if (ord.rows.length > 30) { ord.rows.length = 30; }
      if (ord === action) {
        attempts.insertBefore(paint(r), attempts.firstChild);
        while (attempts.children.length > 30) { attempts.removeChild(attempts.lastChild); }
        save();
      }
      return r;
    }
    function update(ord, r) {
      if (r.li) { paint(r); }
      if (ord === action) { save(); }
    }

    function describe(r, res) {
      if (res.network) {
        r.status = "network";
        r.badge = "no response";
        r.tone = "bad";
        r.words = res.network;
        return;
      }
      r.status = String(res.status);
      r.tone = res.status < 300 ? "ok" : (res.status === 409 || res.status === 429 ? "warn" : "bad");
      r.badge = String(res.status) + (res.replayed ? " replayed" : "");
      if (res.status < 300) {
        r.words = res.replayed ? "the saved answer, sent again: nothing charged again" : "created";
      } else if (res.status === 409) {
        r.words = "refused: another request with this key has started and not finished, and the server runs a key only once";
      } else {
        r.words = (res.body && res.body.title) || "error";
        if (res.replayed) { r.words += " (the saved answer, sent again)"; }
      }
    }

    function countdown(ord, r, ms, n, ceiling, forced) {
      var until = Date.now() + ms;
      return new Promise(function (resolve) {
        function tick() {
          if (run !== r.run || run.stopped) {
            clearInterval(timer);
            r.wait = "stopped: a new order began";
            update(ord, r);
            resolve(false);
            return;
          }
          var left = Math.max(0, until - Date.now());
          if (left <= 0) {
            clearInterval(timer);
            r.wait = "waited " + (ms / 1000).toFixed(2) + " s" + (forced ? " (the server's Retry-After)" : "");
            update(ord, r);
            resolve(true);
            return;
          }
          r.wait = "retry " + n + " in " + (left / 1000).toFixed(2) + " s " + (forced ? "(the server asked for " + secondsText(ms) + ")" :
            "(drawn from 0\u2013" + (ceiling / 1000).toFixed(2) + " s)");
          if (r.li) { paint(r); }
        }
        var timer = setInterval(tick, 50);
        tick();
      });
    }

    // Payment requests go without cookies and carry the session in a
    // header: the browser keeps a separate connection pool for them, and
    // the server closes each connection after its answer, so every attempt
    // goes out on a fresh connection. On a reused one, Chromium would send
    // a POST again by itself when the connection closes unanswered, and the
    // page would never see the lost response it has to retry.
    //
    // An attempt gives up after cfg.attemptMS without an answer, but the
    // time its request spends held by step mode does not count: a held
    // request is the presenter's pause, not a slow server, and a page that
    // gave up would leave the server with a request nobody waits for.
    function send(req) {
      var ctl = new AbortController();
      var waited = 0, last = Date.now();
      var timer = setInterval(function () {
        var now = Date.now();
        if (!heldNow(req.key)) { waited += now - last; }
        last = now;
        if (waited >= cfg.attemptMS) { ctl.abort(); }
      }, HELD_POLL_MS);
      var headers = { "Content-Type": "application/json", "Idempotency-Key": req.key, "Accept": "application/json" };
      if (cfg.session) { headers["Paytwice-Session"] = cfg.session; }
      // Names this attempt, so the server can tell the page if the
      // browser sent it more than once by itself, and the page can say
      // whether the answer reached it (tellDelivery).
      var attemptId = uuid();
      headers["Paytwice-Attempt"] = attemptId;
      // Which click and which retry of it, for the step bar on the board.
      headers["Paytwice-Click"] = req.click + (req.attempt > 0 ? "." + req.attempt : "");
      return fetch("/v1/payments", {
        method: "POST",
        headers: headers,
        body: JSON.stringify({ order_id: req.orderId, amount_satang: req.amount }),
        credentials: cfg.session ? "omit" : "same-origin",
        cache: "no-store",
        signal: ctl.signal,
      }).then(function (r) {
        return r.text().then(function (text) {
          var body = null;
          try { body = JSON.parse(text); } catch (e) { /* not JSON */ }
          tellDelivery({ attempt: attemptId, received: true, status: r.status });
          return { status: r.status, body: body, replayed: r.headers.get("Idempotent-Replayed") === "true", retryAfter: r.headers.get("Retry-After"),
            copies: parseInt(r.headers.get("Paytwice-Attempt-Copies") || "1", 10) || 1 };
        });
      }).catch(function (err) {
        var why = err && err.name === "AbortError" ? "timed out: no answer in " + (cfg.attemptMS / 1000) + " s" : "the connection closed with no answer";
        tellDelivery({ attempt: attemptId, received: false, why: why });
        return { network: why };
      }).finally(function () { clearInterval(timer); });
    }

    // tellDelivery says whether an attempt's answer reached this page: the
    // server only knows it sent it, and the timeline draws the answer as
    // arrived only once the page says so. Best effort: a word that is
    // lost leaves the arrow drawn as sent.
    function tellDelivery(report) {
      fetch("/api/delivery", {
        method: "POST", credentials: "same-origin", cache: "no-store", keepalive: true,
        headers: { "Content-Type": "application/json", "Accept": "application/json" },
        body: JSON.stringify(report),
      }).catch(function () { /* the arrow stays drawn as sent */ });
    }

    // heldNow reports whether step mode holds a request of this browser
    // with the key: the timeline, which the event stream keeps current,
    // shows it paused on its row until it goes on.
    function heldNow(key) {
      var you = card.getAttribute("data-you") || "";
      var steps = document.querySelectorAll('#timeline [id$="-held"]');
      for (var i = 0; i < steps.length; i++) {
        var row = steps[i].closest("li.tl-row, #timeline > li");
        if (!row) { continue; }
        var code = row.querySelector(".tl-head code");
        var who = row.querySelector(".tl-head .who");
        if (code && code.getAttribute("title") === key && (!you || (who && who.textContent.trim() === you))) { return true; }
      }
      return false;
    }

    // GET /v1/payments?order_id=: is the order paid? "unknown" when the
    // look-up itself failed.
    async function lookUp(ord, click, why) {
      var r = addRow(ord, { kind: "reconcile", click: click, words: why + " GET /v1/payments?order_id=" + ord.orderId + "\u2026" });
      var found = await fetch("/v1/payments?order_id=" + encodeURIComponent(ord.orderId), {
        credentials: "same-origin", cache: "no-store", headers: { "Accept": "application/json" },
      }).then(function (res) { return res.ok ? res.json() : null; }).catch(function () { return null; });
      // settle draws the look-up's answer on its row and returns it.
      function settle(paid, badge, tone, words, state, charges) {
        r.paid = paid;
        r.badge = badge;
        r.tone = tone;
        r.words = words;
        update(ord, r);
        return { state: state, charges: charges };
      }
      if (!found || !Array.isArray(found.charges)) {
        return settle("unknown", "unknown", "warn", "the look-up failed: whether this order is paid is unknown", "unknown", []);
      }
      var charges = found.charges;
      if (charges.length > 1) {
        return settle("true", "paid " + times(charges.length), "bad", "the order has " + charges.length + " charges", "paid", charges);
      }
      if (charges.length === 1) {
        return settle("true", "paid", "ok", "the order is paid (" + charges[0].charge_id + ")", "paid", charges);
      }
      if (found.state === "pending") {
        var wait = found.retry_after_seconds || 1;
        var out = settle("pending", "pending", "warn", "a payment for this order is under way and its outcome is not known yet: look again in " + secondsText(wait * 1000), "pending", []);
        out.retryAfter = wait;
        return out;
      }
      var why = found.not_charged ? " (" + String(found.not_charged.reason).replace(/_/g, " ") + ")" : "";
      return settle("false", "not paid", "mute", "no charge for this order" + why, "none", []);
    }

    // foundOf reads a look-up's body as the card uses it.
    function foundOf(b) {
      if (!b) { return { state: "unknown", charges: [] }; }
      if (b.charges.length > 0) { return { state: "paid", charges: b.charges }; }
      if (b.state === "pending") { return { state: "pending", charges: [], retryAfter: b.retry_after_seconds || 1 }; }
      return { state: "none", charges: [] };
    }

    // quietLookUp asks the server what it has for an order, as the card
    // checking itself (not a client's reconciliation: neither the
    // timeline nor the lab counts it); null when the look-up failed.
    function quietLookUp(orderId) {
      return fetch("/v1/payments?order_id=" + encodeURIComponent(orderId), {
        credentials: "same-origin", cache: "no-store", headers: { "Accept": "application/json", "Paytwice-Card-Check": "1" },
      }).then(function (res) { return res.ok ? res.json() : null; }).catch(function () { return null; }).then(function (b) {
        return b && Array.isArray(b.charges) ? b : null;
      });
    }

    // The lab's server mode, as the presenter set it for the room:
    // "correct" unless one of its mistakes is on.
    function labServerMode() {
      var boxes = document.querySelectorAll("[data-lab-mode]");
      for (var i = 0; i < boxes.length; i++) {
        if (boxes[i].checked) { return boxes[i].getAttribute("data-lab-mode"); }
      }
      var check = document.querySelector('select[data-lab="server.mode"]');
      return (check && check.value) || "correct";
    }
    function lessonSlug() {
      var l = $("lesson");
      return (l && l.getAttribute("data-slug")) || "";
    }
    // againWords says what paying again with the same key does: safe with
    // a server that runs a key once, not with the lab's servers that do
    // not.
    function againWords() {
      if (labOn("new_key_per_retry")) {
        return "Careful: every browser here is making the mistake of a new key on every retry, so paying again goes out under yet another key, and the server charges it as a new payment.";
      }
      if (labOn("new_key_after_500")) {
        return "Careful: every browser here pays again under a new key after a 500, and the server charges that as a new payment.";
      }
      var mode = labServerMode();
      if (mode === "correct" || mode === "check_then_insert_constrained") {
        return "Paying again with the same key is safe: the server runs a key at most once.";
      }
      return "Careful: the server is running one of the lab's mistakes and does not guard the key, so paying again may charge again.";
    }

    // The lab's client mistakes, as the presenter set them for every
    // browser in the room.
    function labOn(name) {
      var box = document.querySelector('[data-lab="client.' + name + '"]');
      return !!(box && box.checked);
    }
    function personalKey() {
      var input = $("lab-email");
      return (input && input.value.trim()) || "somchai.j@example.com";
    }
    function changeKey(ord, key) {
      ord.key = key;
      if (ord.keys.indexOf(key) < 0) { ord.keys.push(key); }
      if (ord === action) {
        save();
        drawAction();
      }
    }

    // A 400 or a 422 is the same answer however often it is sent.
    function refused(res) {
      return res.status >= 400 && res.status < 500 && res.status !== 409 && res.status !== 429;
    }

    function retryable(res) {
      if (res.replayed) { return false; } // a saved answer is final: sending the key again replays it again
      if (labOn("retry_every_4xx") && refused(res)) { return true; } // the mistake, on purpose
      return !!res.network || res.status === 409 || res.status === 429 || res.status >= 500;
    }

    // One request and, when retrying is on, its retries. Every answer
    // that only repeats a refusal the page already had is marked wasted.
    async function sendWithRetries(ord, my, n, req, label) {
      var retrying = opts.retry || labOn("new_key_per_retry") || labOn("retry_every_4xx");
      var refusals = 0;
      var wasted = 0;
      for (var attempt = 0; ; attempt++) {
        if (attempt > 0 && labOn("new_key_per_retry")) {
          // The mistake, on purpose: every retry gets a fresh key, so the
          // server cannot know it is the same payment.
          req.key = uuid();
          changeKey(ord, req.key);
        }
        req.attempt = attempt;
        if (!ord.firstSent[req.key]) { ord.firstSent[req.key] = roomNow(); }
        var r = addRow(ord, { click: n, attempt: attempt, label: label, key: req.key });
        Object.defineProperty(r, "run", { value: my });
        var res = await send(req);
        describe(r, res);
        if (res.copies > 1) {
          // The browser's own re-send, drawn as the step it was.
          addRow(ord, { kind: "resent", click: n, attempt: attempt, label: label ? label + " \u00b7 browser" : "browser", badge: "re-sent by the browser", tone: "warn",
            words: "the browser sent this request " + times(res.copies) + " by itself, after a connection closed unanswered; the answer below is its last copy's" });
        }
        if (refused(res) && ++refusals > 1) {
          wasted++;
          r.wasted = true;
        }
        update(ord, r);
        if (!retryable(res) || !retrying || attempt >= cfg.retries || my.stopped) {
          res.wasted = wasted;
          return res;
        }
        var ceiling = Math.min(cfg.cap, cfg.base * Math.pow(2, attempt));
        var wait = Math.random() * ceiling;
        var ra = parseInt(res.retryAfter || "", 10);
        var forced = !isNaN(ra) && ra * 1000 > wait;
        if (forced) { wait = ra * 1000; }
        if (ord === action && my.inflight <= 1) {
          setStatus("waiting", [badge("retrying", "warn"), labOn("new_key_per_retry") ?
            " No final answer yet; retrying soon, under a new key." : " No final answer yet; sending the same key again soon."]);
        }
        if (!await countdown(ord, r, wait, attempt + 1, ceiling, forced)) {
          return { stopped: true };
        }
      }
    }

    // After a final 500 the charge may have happened. The right move is to
    // look the order up; the lab's mistake pays again under a new key.
    async function after500(ord, my, n, req, res) {
      if (labOn("new_key_after_500")) {
        // The mistake, on purpose: give up on the key and pay again.
        if (ord === action) { setStatus("waiting", [badge("500", "bad"), " The server failed; paying again under a new key."]); }
        req.key = uuid();
        changeKey(ord, req.key);
        var again = await sendWithRetries(ord, my, n, req, "new key after 500");
        again.afterNewKey = true;
        return again;
      }
      if (ord === action) {
        setStatus("checking", [badge("500", "bad"), res.replayed ? " The server's saved answer for this key is a failure, and it is final: looking the order up before anything else." :
          " The server failed after it started: looking the order up before anything else."]);
      }
      return lookUpBeforeAnythingElse(ord, n, res);
    }

    // lookUpBeforeAnythingElse looks the order up after a final answer
    // that leaves the charge unknown (500, 504): paid is the answer the
    // card shows; otherwise res carries the state the look-up said.
    async function lookUpBeforeAnythingElse(ord, n, res) {
      var found = await lookUp(ord, n, "");
      if (found.state === "paid") {
        var ch = found.charges[found.charges.length - 1];
        return { status: 200, reconciled: true, body: { status: "paid", charge_id: ch.charge_id } };
      }
      res.lookup = found.state;
      res.retryLookupSeconds = found.retryAfter;
      return res;
    }

    // After a final 504 the gateway did not answer: it may have charged.
    // Look the order up, as after a 500; the look-up says pending while
    // the key stays started, and the card says the outcome is unknown.
    async function after504(ord, my, n, res) {
      if (ord === action) {
        setStatus("checking", [badge("504", "bad"), " The gateway did not answer, so it may have charged: looking the order up before anything else."]);
      }
      return lookUpBeforeAnythingElse(ord, n, res);
    }

    async function click() {
      var ord = action, my = run;
      var n = ++ord.clicks;
      if (opts.guard && my.inflight > 0) {
        my.blocked++;
        addRow(ord, { kind: "blocked", click: n, badge: "blocked", tone: "mute", words: "the guard kept this click from sending anything" });
        drawSending();
        return;
      }
      if (opts.newKey) {
        // The mistake, on purpose: a fresh key for the same order.
        changeKey(ord, uuid());
      }
      if (labOn("personal_data_key") && ord.key !== personalKey()) {
        // The mistake, on purpose: the customer's e-mail address as the key.
        changeKey(ord, personalKey());
      }
      var amt = parseBaht(amount.value);
      if (amt === null) {
        setStatus("invalid", [badge("amount", "bad"), " Type an amount in baht, like 1,299.00."]);
        return;
      }
      var req = { key: ord.key, orderId: ord.orderId, amount: amt, click: n, attempt: 0 };
      my.inflight++;
      drawGuard();
      if (!ord.paid) { drawSending(); }
      var res;
      try {
        res = await sendWithRetries(ord, my, n, req, "");
        if (res.status === 500) {
          res = await after500(ord, my, n, req, res);
        } else if (res.status === 504) {
          res = await after504(ord, my, n, res);
        }
      } finally {
        my.inflight--;
        if (my === run) { drawGuard(); }
      }
      if (!res.stopped && !my.stopped) {
        finish(ord, my, n, req, res);
        reconcile(ord, my);
      }
    }

    function wastedNote(res) {
      if (!res.wasted) { return []; }
      return [" ", badge(res.wasted + " wasted", "bad"), " " + res.wasted + (res.wasted === 1 ? " retry" : " retries") +
        " got the same answer: sending a " + res.status + " again never changes it."];
    }

    // Each distinct charge id in a 201 is a charge of its own: an order
    // paid under several keys (a mistake, on purpose), or by a server that
    // ignores the key, was charged more than once, and the card says so in
    // red. A replay carries the charge id it replays, so it counts once.
    function checkTwice(ord, my, res, key, req) {
      if (res.reconciled) { return; }
      var id = (res.body && res.body.charge_id) || key;
      ord.charged = ord.charged || [];
      if (ord.charged.indexOf(id) < 0) { ord.charged.push(id); }
      var amount = res.body && typeof res.body.amount_satang === "number" ? res.body.amount_satang : req.amount;
      if (typeof amount === "number") { (ord.amounts = ord.amounts || {})[id] = amount; }
      save();
      var n = ord.charged.length;
      if (n < 2 || ord !== action || my !== run) { return; }
      drawTwice(ord, n);
    }

    // sameKeyWhy says how one key was charged more than once, by what the
    // room is showing: the lab's table says it per server mode
    // (data-lab-storms on its list of mistakes); with the protocol right,
    // only a pruned key can do it.
    function sameKeyWhy() {
      var mode = labServerMode();
      var list = document.querySelector("[data-lab-storms]");
      var storms = {};
      try { storms = JSON.parse((list && list.getAttribute("data-lab-storms")) || "{}"); } catch (e) { storms = {}; }
      if (lessonSlug() === "prune-too-soon" || mode === "correct") { mode = "key_table_only"; }
      return storms[mode] || " Every request carried the same key, yet the server ran it more than once.";
    }

    // chargedAmounts says what the order's n charges came to, from the
    // amount of each charge (its answer's, or the server's books when the
    // card checked them): "2 × ฿1,299.00" when they are alike, each one
    // when they differ (the amount was changed between payments), and
    // nothing when one of them is not known.
    function chargedAmounts(ord, n) {
      var amounts = (ord.charged || []).map(function (id) { return ord.amounts ? ord.amounts[id] : undefined; });
      if (amounts.length !== n || amounts.some(function (a) { return typeof a !== "number"; })) { return ""; }
      if (amounts.every(function (a) { return a === amounts[0]; })) { return ": " + n + " \u00d7 \u0e3f" + formatBaht(amounts[0]); }
      return ": " + amounts.map(function (a) { return "\u0e3f" + formatBaht(a); }).join(" + ");
    }

    function drawTwice(ord, n) {
      var why = ord.keys.length > 1 ? " Each request had a key of its own, so the server saw " + n + " different payments and ran each one." : sameKeyWhy();
      setStatus("twice", [badge("charged " + times(n), "bad"), " Order " + ord.orderId + " was charged " + times(n) + chargedAmounts(ord, n) + "." + why], n);
      setExplain([el("strong", "", "Charged " + times(n) + ". "),
        "One order needs one key, made once and sent with every click and every retry, and a server that runs each key once. ",
        link("/problems/key-reused", "How a key works")]);
    }

    // reconcile checks what the card says about the order's charges with
    // the server (GET /v1/payments?order_id=) once none of the order's
    // requests is under way, after every answer and every change of the
    // room, and redraws the card where they differ: the card never states
    // a count, or a charge, the server does not have.
    var checks = 0;
    function reconcile(ord, my) {
      if (ord !== action || my !== run || my.inflight > 0 || !ord.clicks) { return; }
      if (status.getAttribute("data-state") === "unknown" && ord.lookFailed) {
        // The card said it could not know because its look-up failed (the
        // server was gone): the server may know now. Look again, and say
        // what it says, unknown again included.
        ord.lookFailed = false;
        var asked = ++checks;
        lookUp(ord, 0, "looked again:").then(function (found) {
          if (asked !== checks || ord !== action || my !== run || my.inflight > 0 || my.stopped) { return; }
          if (status.getAttribute("data-state") !== "unknown") { return; }
          drawFound(ord, my, found);
        });
        return;
      }
      var ticket = ++checks;
      fetch("/v1/payments?order_id=" + encodeURIComponent(ord.orderId), {
        credentials: "same-origin", cache: "no-store", headers: { "Accept": "application/json", "Paytwice-Card-Check": "1" },
      }).then(function (res) { return res.ok ? res.json() : null; }).catch(function () { return null; }).then(function (found) {
        if (!found || !Array.isArray(found.charges) || ticket !== checks || ord !== action || my !== run || my.inflight > 0 || my.stopped) { return; }
        var charges = found.charges, n = charges.length, last = charges[n - 1];
        // A status that states no count (a 422, "may or may not have
        // charged") is left as it is: it says nothing the server denies.
        var said = status.getAttribute("data-charges");
        if (said === null) { return; }
        if (n === 0) {
          if (said === "0") { return; }
          ord.paid = null;
          ord.charged = [];
          addRow(ord, { kind: "reconcile", paid: "false", badge: "not paid", tone: "mute", words: "checked with the server: no charge for this order" });
          setStatus("ready", [badge("not paid", "mute"), " The server has no charge for order " + ord.orderId + "."], 0);
          setExplain(null);
          return;
        }
        if (n === 1 && said === "1" && ord.paid && ord.paid.charge === last.charge_id) { return; }
        if (n > 1 && said === String(n)) { return; }
        ord.charged = charges.map(function (c) { return c.charge_id; });
        ord.amounts = {};
        charges.forEach(function (c) { ord.amounts[c.charge_id] = c.amount_satang; });
        ord.paid = { amount: last.amount_satang, charge: last.charge_id, key: ord.key };
        addRow(ord, { kind: "reconcile", paid: "true", badge: n > 1 ? "paid " + times(n) : "paid", tone: n > 1 ? "bad" : "ok",
          words: "checked with the server: " + (n > 1 ? n + " charges for this order" : "one charge, " + last.charge_id) });
        if (n > 1) {
          drawTwice(ord, n);
        } else {
          drawPaid("Checked with the server: this is the order's one charge.");
          setExplain(null);
        }
      });
    }

    // The key is held by a request that did not finish: the server will
    // not run it again until the sweeper has asked the gateway. Count
    // down to then, and look the order up once the sweeper has been.
    function drawHeld(ord, my, req) {
      // The countdown runs on the room's clock: when the presenter
      // advances it, the key ages at once, as the sweeper sees it. The
      // key's age starts when the server claimed it: the page's own send
      // until the server says (its look-up's locked_at).
      var since = ord.firstSent[req.key] || roomNow();
      var due = since + cfg.lockMS;
      quietLookUp(ord.orderId).then(function (found) {
        var held = found && Array.isArray(found.pending) ? found.pending.filter(function (p) { return p.key === req.key; })[0] : null;
        var at = held ? Date.parse(held.locked_at) : NaN;
        if (!isNaN(at)) { due = at + cfg.lockMS; }
      });
      var when = el("strong", "when", "");
      // What this page heard from the key's earlier requests.
      var earlier = ord.rows.filter(function (r) { return r.kind === "send" && r.key === req.key && r.status && r.status !== "409"; })
        .map(function (r) { return r.status; });
      var first = earlier.indexOf("network") >= 0 ? "An earlier request with this key never answered (its connection dropped)" :
        earlier.some(function (st) { return st.charAt(0) === "5"; }) ? "An earlier request with this key answered " + earlier.filter(function (st) { return st.charAt(0) === "5"; })[0] + " after it started" :
          "A request with this key has started and not finished";
      setStatus("held", [badge("key held", "warn"), " " + first + ", and its key is still marked started: " +
        "the server refuses to run it again while it cannot tell whether the gateway charged. The sweeper asks the gateway once the key is " +
        secondsText(cfg.lockMS) + " old: ", when, "."]);
      setExplain([el("strong", "", "Why 409 every time? "), "Nobody is left to finish the first request, so only the sweeper can close its key: it asks the gateway whether a charge with this key exists, and saves that as the answer. Until then a retry with the same key gets 409, and that is what keeps the order from being charged twice. ",
        link("/problems/request-in-progress", "What 409 means here")]);
      var passed = 0; // when the room's clock passed the lock timeout, on this page's clock
      function tick() {
        var left = due - roomNow();
        if (left > 0) {
          passed = 0;
          when.textContent = "in " + secondsText(left);
          return;
        }
        // The sweeper's next pass comes on the server's own time, warped
        // clock or not.
        if (!passed) { passed = Date.now(); }
        if (Date.now() - passed < cfg.sweepMS + 1000) {
          when.textContent = "now, on its next pass (it runs every " + secondsText(cfg.sweepMS) + ")";
          return;
        }
        stopTimer();
        lookUp(ord, 0, "after the sweeper:").then(function (found) {
          if (ord !== action || my.stopped || my.inflight > 0) { return; }
          if (found.state === "paid") {
            ord.paid = { amount: req.amount, charge: found.charges[found.charges.length - 1].charge_id, key: req.key };
            save();
            drawPaid("The sweeper found the charge at the gateway and closed the key with it.");
            setExplain(null);
          } else if (found.state === "none") {
            setStatus("ready", [badge("not paid", "mute"), " No charge for this order. Pay again with the same key: the server answers what the sweeper saved, or runs it afresh."], 0);
          } else {
            drawFound(ord, my, found); // still pending, or the look-up failed: it says which
          }
        });
      }
      run.timer = setInterval(tick, 250);
      tick();
    }

    // The words for the parts of a request a 422 names as different
    // (its problem body's differing_fields).
    var FIELD_WORDS = { order_id: "the order id", amount_satang: "the amount", method: "the method", path: "the path" };
    function fieldsText(fields) {
      var w = fields.map(function (f) { return FIELD_WORDS[f] || f; });
      if (w.length < 2) { return w[0] || ""; }
      return w.slice(0, -1).join(", ") + " and " + w[w.length - 1];
    }

    // drawKeyReused explains a 422 from what the server said differs
    // (differing_fields), never from a guess. An order already paid says
    // so first: the refusal is of the request sent after.
    function drawKeyReused(ord, req, res) {
      var b = res.body || {};
      var fields = Array.isArray(b.differing_fields) ? b.differing_fields : [];
      var what = fieldsText(fields);
      var differs = what ? what + (fields.length > 1 ? " differ" : " differs") + " from the request the key was first used with" :
        "the request differs from the one the key was first used with";
      var email = labOn("personal_data_key") && req.key === personalKey();
      if (ord.paid) {
        // The order is paid: that is the headline; the 422 refused only
        // the request sent after it.
        var charges = (ord.charged && ord.charged.length) || 1;
        setStatus("mismatch", [badge("paid", "ok"), " Order " + ord.orderId + " is paid: \u0e3f" + formatBaht(ord.paid.amount) + ", charge ",
          el("code", "", ord.paid.charge || "?"), ". ", badge("422", "bad"), " The request sent after it with the same key was not run: " + differs +
          ", so the server neither replayed that answer nor charged it again."].concat(wastedNote(res)), charges);
      } else {
        setStatus("mismatch", [badge("422", "bad"), " Refused, not run: " + differs + ", so the server neither replayed that answer nor charged this request." +
          " Order " + ord.orderId + " has no charge from it."].concat(wastedNote(res)), (ord.charged && ord.charged.length) || 0);
      }
      var why;
      if (email && fields.indexOf("order_id") >= 0) {
        why = "The key is the customer's e-mail address (" + req.key + "), the same for every order they place. An earlier order was paid with it, so order " +
          ord.orderId + " arrived with a key that already belongs to another request: " + differs + ". One customer, one key, and their next order is refused. A key must be new for every payment: a random UUID. ";
      } else if (fields.length === 1 && fields[0] === "amount_satang") {
        why = "The amount differs from the one this key was first sent with. The key stands for one action, and the server remembers what that action was (its fingerprint), so it will neither replay the old answer nor run a new charge. Retrying cannot help; a new payment needs a new key: press New order. ";
      } else {
        why = "This key was first used with a different request: " + differs + ". The key stands for one action, and the server remembers what that action was (its fingerprint), so it will neither replay the old answer nor run a new charge. Retrying cannot help; a new payment needs a new key: press New order. ";
      }
      setExplain([el("strong", "", "Why 422? "), why, link("/problems/key-reused", "More about 422 key reused")]);
    }

    // settleFromBooks looks the order up and says what the server has for
    // it: its charges, counted, or that its outcome is not known yet.
    // It is the card checking itself, not a client reconciling: the
    // timeline and the lab do not count it. after, when given, is told
    // what was found once it is drawn.
    function settleFromBooks(ord, my, lead, after) {
      setStatus("checking", lead);
      quietLookUp(ord.orderId).then(function (body) {
        if (ord !== action || my !== run || my.inflight > 0 || my.stopped) { return; }
        var found = foundOf(body);
        var n = found.charges.length;
        addRow(ord, { kind: "reconcile", paid: found.state === "paid" ? "true" : (found.state === "none" ? "false" : "unknown"),
          badge: found.state === "paid" ? (n > 1 ? "paid " + times(n) : "paid") : found.state === "none" ? "not paid" : found.state,
          tone: found.state === "paid" ? (n > 1 ? "bad" : "ok") : (found.state === "none" ? "mute" : "warn"),
          words: "checked with the server: " + (found.state === "paid" ? (n > 1 ? n + " charges for this order" : "one charge, " + found.charges[0].charge_id) :
            found.state === "none" ? "no charge for this order" : found.state === "pending" ? "its outcome is not known yet" : "the look-up failed") });
        drawFound(ord, my, found);
        if (after) { after(found); }
      });
    }

    // drawFound draws a look-up's answer on the card.
    function drawFound(ord, my, found) {
      var charges = found.charges || [];
      if (found.state === "paid") {
        ord.charged = charges.map(function (c) { return c.charge_id; });
        var last = charges[charges.length - 1];
        ord.paid = { amount: last.amount_satang, charge: last.charge_id, key: ord.key };
        save();
        if (charges.length > 1) {
          drawTwice(ord, charges.length);
        } else {
          drawPaid("Looked up: this is the order's one charge.");
          setExplain(null);
        }
      } else if (found.state === "pending") {
        drawPending(ord, my, found.retryAfter, []);
      } else if (found.state === "none") {
        setStatus("ready", [badge("not paid", "mute"), " The server has no charge for order " + ord.orderId + ". " + againWords()], 0);
      } else {
        ord.lookFailed = true;
        setStatus("unknown", [badge("unknown", "warn"), " The look-up failed: whether this order is paid is unknown. " + againWords()]);
      }
    }

    // drawPending says the order's outcome is not known yet, counts down
    // to the next look, and looks again (and at once when the room
    // changes) until the server knows.
    function drawPending(ord, my, seconds, lead) {
      var wait = Math.max(1, Math.min(seconds || 1, 5)) * 1000;
      var due = Date.now() + wait;
      var when = el("strong", "when", "");
      setStatus("pending", lead.concat([badge("outcome unknown", "warn"), " A payment for order " + ord.orderId +
        " has started and its outcome is not known yet (the gateway may have charged it): do not pay under a new key. Looking again ", when, "."]));
      setExplain([el("strong", "", "Why unknown? "), "The gateway may have charged with this key, and nothing is saved on the key yet. " +
        "It stays started, so a retry with the same key gets 409, until the sweeper has asked the gateway and saved what it says. ",
        link("/problems/server-error", "What a 500 means here")]);
      var looking = false;
      function look() {
        if (looking) { return; }
        looking = true;
        stopTimer();
        quietLookUp(ord.orderId).then(function (body) {
          if (ord !== action || my !== run || my.inflight > 0 || my.stopped || status.getAttribute("data-state") !== "pending") { return; }
          var found = foundOf(body);
          if (found.state !== "pending") {
            var n = found.charges.length;
            addRow(ord, { kind: "reconcile", paid: found.state === "paid" ? "true" : (found.state === "none" ? "false" : "unknown"),
              badge: found.state === "paid" ? (n > 1 ? "paid " + times(n) : "paid") : (found.state === "none" ? "not paid" : "unknown"),
              tone: found.state === "paid" ? (n > 1 ? "bad" : "ok") : (found.state === "none" ? "mute" : "warn"),
              words: found.state === "paid" ? "looked again: the outcome is known, " + (n > 1 ? n + " charges for this order" : "one charge, " + found.charges[0].charge_id) :
                found.state === "none" ? "looked again: the outcome is known, no charge for this order" : "the look-up failed" });
          }
          drawFound(ord, my, found);
        });
      }
      run.pendingLook = look;
      run.timer = setInterval(function () {
        var left = due - Date.now();
        if (left <= 0) { look(); return; }
        when.textContent = "in " + secondsText(left);
      }, 250);
      when.textContent = "in " + secondsText(wait);
    }

    function finish(ord, my, n, req, res) {
      if (ord !== action || my !== run) {
        return; // an earlier order's request: its row says how it ended
      }
      ord.lookFailed = res.lookup === "unknown";
      if (res.status === 201 || (res.status === 200 && res.body && res.body.status === "paid")) {
        ord.paid = { amount: req.amount, charge: res.body && res.body.charge_id, key: req.key };
        save();
        drawPaid(res.replayed ? "The server replayed its saved answer (Idempotent-Replayed: true)." :
          res.reconciled ? "The 500 had charged: looking the order up showed it, so nothing was paid twice." : "");
        setExplain(null);
        if (res.status === 201) { checkTwice(ord, my, res, req.key, req); }
        return;
      }
      if (res.status === 422) {
        drawKeyReused(ord, req, res);
        return;
      }
      if (ord.paid && ord.paid.key === req.key && (res.network || res.status === 409)) {
        // A slower click ended after this order's payment went through
        // (reconcile, which follows, checks the charge with the server).
        drawPaid();
        return;
      }
      if (res.status === 409 && my.inflight > 0) {
        // The first click is still running: the 409 is the protection.
        drawSending([" ", badge("409", "ok"), " Click " + n + " was refused: a request with the same key was still running when it arrived, so the server did not run this one. The first click's answer is still to come."]);
        return;
      }
      if (res.network && my.inflight > 0) {
        drawSending([" Click " + n + " got no answer."]);
        return;
      }
      if (res.status === 409) {
        drawHeld(ord, my, req);
        return;
      }
      if (res.network && ord.keys.length > 1) {
        // The order went out under several keys (a mistake, on purpose):
        // each may have charged. The server's books say how many did.
        settleFromBooks(ord, my, [badge("no response", "bad"), " The last attempt got no answer either; this order went out under " +
          plural(ord.keys.length, "key", "keys") + ": looking up what the server charged."]);
        return;
      }
      if (res.network) {
        setStatus("unknown", [badge("no response", "bad"), " The request may or may not have charged. " + againWords()]);
        setExplain(null);
        return;
      }
      var b = res.body || {};
      if (res.status === 500 && res.lookup === "pending" && !res.afterNewKey) {
        // The look-up says the outcome is not known yet: say so, and look
        // again until the books know.
        drawPending(ord, my, res.retryLookupSeconds, [badge("500", "bad"), " The server failed after it started. "]);
        return;
      }
      if (res.status === 504 && res.lookup === "pending") {
        drawPending(ord, my, res.retryLookupSeconds, [badge("504", "bad"), " The gateway did not answer. "]);
        return;
      }
      var tone = res.status === 429 ? "warn" : "bad";
      var detail = res.status === 500 && res.lookup === "pending" ? "A 500 means the outcome is unknown, and the look-up says so: a payment for this order is still pending. " +
        "Do not pay with a new key: retry with the same key, or look the order up again, after the sweeper has asked the gateway." :
        res.status === 500 && res.lookup === "none" ? "A 500 means the outcome is unknown: the server may have failed before or after the gateway charged. " +
        "Looking the order up finds no charge recorded for it (yet). " + againWords() :
        res.status === 504 && res.lookup === "none" ? "The gateway did not answer, so the outcome was unknown; looking the order up finds no charge recorded for it (yet). " + againWords() :
        (res.status === 500 || res.status === 504) && res.lookup === "unknown" ? "The look-up failed, so whether the order is paid is unknown." : (b.detail || "");
      setStatus(res.lookup === "unknown" ? "unknown" : "error", [badge(String(res.status), tone), " " + (b.title || "Error") + ". " + detail].concat(wastedNote(res)),
        res.lookup === "none" ? 0 : undefined);
      if (res.afterNewKey && res.status === 500) {
        // The mistake paid again under a new key: what it cost is in the
        // server's books, not in the two 500s.
        settleFromBooks(ord, my, [badge("500", "bad"), " The server failed again, under the new key: looking up what it charged for order " + ord.orderId + "."],
          function (found) {
            if (found.state !== "paid" || found.charges.length < 2) { return; }
            setExplain([el("strong", "", "Paid " + times(found.charges.length) + ". "),
              "The first 500 came after the charge, and the page paid again under a new key instead of looking the order up. ",
              link("/problems/server-error", "What a 500 means here")]);
          });
        return;
      }
      if (res.afterNewKey) {
        setExplain([el("strong", "", "A new key after a 500. "),
          "The page paid again under a new key instead of looking the order up; the lines above say how the second payment ended. ",
          link("/problems/server-error", "What a 500 means here")]);
        return;
      }
      var slug = typeof b.type === "string" ? b.type.replace(/^.*\/problems\//, "") : "";
      if (/^[a-z-]+$/.test(slug)) {
        setExplain([link("/problems/" + slug, "What does " + res.status + " mean here?")]);
      } else {
        setExplain(null);
      }
    }

    // After a reload: draw the order's rows again; a request that had no
    // answer yet (or a retry that was counting down) may have charged, so
    // look the order up. It reports whether it is looking the order up.
    function restore() {
      attempts.textContent = "";
      var pending = false;
      for (var i = action.rows.length - 1; i >= 0; i--) {
        var r = action.rows[i];
        if ((r.kind === "send" || r.kind === "reconcile") && !r.badge) {
          pending = true;
          r.badge = "reloaded";
          r.tone = "mute";
          r.words = "the page was reloaded before the answer came";
        }
        if (r.wait && /^retry /.test(r.wait)) {
          pending = true;
          r.wait = "retry not sent: the page was reloaded";
        }
        attempts.insertBefore(paint(r), attempts.firstChild);
      }
      // The last request without a final answer may have charged too.
      var last = action.rows.filter(function (r) { return r.kind === "send" && r.status; })[0];
      if (last && (last.status === "network" || last.status === "409" || last.status.charAt(0) === "5")) { pending = true; }
      save();
      if (action.paid && action.paid.key === action.key) {
        drawPaid();
        return false;
      }
      if (!action.rows.length) { return false; }
      if (!pending) {
        setStatus("ready", [badge("sent before", "mute"), " " + plural(action.clicks, "click", "clicks") + " for this order before the reload; the rows below say how each ended."]);
        return false;
      }
      var ord = action, my = run;
      setStatus("checking", [badge("checking", "info"), " The page was reloaded while this order's requests were under way: looking the order up."]);
      lookUp(ord, 0, "after the reload:").then(function (found) {
        if (ord !== action || my.stopped || my.inflight > 0) { return; }
        if (found.state === "paid") {
          ord.paid = { amount: ord.amount, charge: found.charges[found.charges.length - 1].charge_id, key: ord.key };
          save();
          drawPaid("Looked up after the reload.");
        } else if (found.state === "none") {
          setStatus("ready", [badge("not paid", "mute"), " Requests were sent before the reload, and the order has no charge yet. " + againWords()], 0);
        } else {
          drawFound(ord, my, found); // still pending, or the look-up failed: it says which
        }
      });
      return true;
    }

    // ---- wiring

    pay.addEventListener("click", function () { click(); });

    // startOrder drops the current order (its retries stop) for a new
    // one with a new key.
    function startOrder(amount) {
      run.stopped = true;
      stopTimer();
      run = freshRun();
      action = freshOrder(newOrderID(), amount, uuid());
      save();
      drawAction();
      drawGuard();
      attempts.textContent = "";
      setExplain(null);
    }

    // drawClosed says that a reset closed the order the page had.
    function drawClosed(old) {
      var was = old && old.clicks ? " Order " + old.orderId + " (" + plural(old.clicks, "click", "clicks") + ") is closed: the reset cleared its key and its charges." : "";
      setStatus("ready", [badge("new order", "info"), " The room was reset for what comes next, so this page started order " + action.orderId + " with a new key." + was + " Nothing sent yet."]);
    }

    // drawMoved says that the page's order is not in these books: the class
    // moved to another database (a SQLite server replaced by a cluster),
    // and nothing in this room closed or charged it.
    function drawMoved(old) {
      var was = old && old.clicks ? " Order " + old.orderId + " (" + plural(old.clicks, "click", "clicks") + ") was paid into the books of the server before; these books do not have it." : "";
      setStatus("ready", [badge("new order", "info"), " The class moved to another server's books (another database), so this page started order " + action.orderId + " with a new key." + was + " Nothing sent yet."]);
    }

    $("new-order").addEventListener("click", function () {
      startOrder(action.amount);
      setStatus("ready", [badge("ready", "mute"), " New order, new key. Nothing sent yet."]);
    });

    // The room moved on (lab.js asks after each frame of the stream): a
    // reset closes the order, any other change is a reason to check the
    // card with the server.
    document.addEventListener("paytwice:room", function (ev) {
      if (ev.detail && ev.detail.books && action.books && ev.detail.books !== action.books) {
        var from = action;
        startOrder(cfg.defaultAmount);
        drawMoved(from);
        return;
      }
      if (ev.detail && ev.detail.epoch !== action.epoch) {
        var old = action;
        startOrder(cfg.defaultAmount);
        drawClosed(old);
        return;
      }
      if (status.getAttribute("data-state") === "pending" && run.pendingLook) {
        run.pendingLook();
        return;
      }
      reconcile(action, run);
    });

    amount.addEventListener("input", function () {
      var v = parseBaht(amount.value);
      amount.setAttribute("aria-invalid", v === null ? "true" : "false");
      if (v === null) { return; }
      action.amount = v;
      save();
      $("pay-amount").textContent = formatBaht(v);
      $("amount-satang").textContent = String(v);
    });

    [["opt-guard", "guard"], ["opt-retry", "retry"], ["opt-newkey", "newKey"]].forEach(function (pair) {
      var box = $(pair[0]);
      box.checked = !!opts[pair[1]];
      box.addEventListener("change", function () {
        opts[pair[1]] = box.checked;
        store(OPTIONS_KEY, opts);
        drawGuard();
      });
    });

    save();
    drawAction();
    drawGuard();
    setExplain(null);
    if (movedFrom) {
      drawMoved(movedFrom);
    } else if (closed) {
      drawClosed(closed);
    } else if (!restore()) {
      reconcile(action, run);
    }
  }
  // -------------------------------------------------------------- faults

  function faultsStatus(nodes) {
    var s = $("faults-status");
    if (!s) { return; }
    s.textContent = "";
    for (var i = 0; i < nodes.length; i++) {
      s.appendChild(typeof nodes[i] === "string" ? document.createTextNode(nodes[i]) : nodes[i]);
    }
  }

  function problemText(status, body) {
    if (status === 403) { return window.paytwiceNotPresenter(); }
    return "Refused (" + status + "): " + ((body && (body.detail || body.title)) || "error");
  }

  var api = window.paytwiceAPI; // static/api.js

  // Put the controls back as the server has them (after a refusal).
  function syncFaults() {
    return api("GET", "/api/faults").then(function (res) {
      if (!res.ok || !res.body) { return; }
      var boxes = document.querySelectorAll("[data-fault]");
      for (var i = 0; i < boxes.length; i++) {
        var path = boxes[i].getAttribute("data-fault").split(".");
        var v = res.body[path[0]] && res.body[path[0]][path[1]];
        if (boxes[i].type === "checkbox") { boxes[i].checked = !!v; } else if (v !== undefined) { boxes[i].value = String(v); }
      }
    });
  }

  function initFaults() {
    document.addEventListener("change", function (ev) {
      var t = ev.target;
      if (!t || !t.matches || !t.matches("[data-fault]")) { return; }
      var path = t.getAttribute("data-fault").split(".");
      var value = t.type === "checkbox" ? t.checked : parseInt(t.value, 10);
      var patch = {};
      patch[path[0]] = {};
      patch[path[0]][path[1]] = value;
      faultsStatus([badge("saving", "mute")]);
      api("PATCH", "/api/faults", patch).then(function (res) {
        if (res.ok) {
          faultsStatus([badge("saved", "ok"), " Every open page shows the change."]);
          return;
        }
        faultsStatus([badge(String(res.status || "error"), "bad"), " " + problemText(res.status, res.body)]);
        syncFaults();
      });
    });
    document.addEventListener("click", function (ev) {
      var t = ev.target;
      if (!t || !t.id) { return; }
      if (t.id === "sweep-now") {
        faultsStatus([badge("sweeping", "mute")]);
        api("POST", "/api/sweep").then(function (res) {
          if (!res.ok) { faultsStatus([badge(String(res.status), "bad"), " " + problemText(res.status, res.body)]); return; }
          var b = res.body || {};
          var n = b.closed ? b.closed.length : 0;
          var room = typeof b.closed_in_room === "number" ? b.closed_in_room : n;
          var secs = res.body ? b.lock_timeout_seconds : "?";
          faultsStatus([badge("swept", "ok"), " This sweep closed " + n + " stuck key" + (n === 1 ? "" : "s") + "; sweeps have closed " + room +
            " in this room since the last reset (the sweeper that runs by itself included). Keys started less than " + secs + " s ago are left alone: their request may still be running."]);
        });
      } else if (t.id === "reset-demo") {
        faultsStatus([badge("resetting", "mute")]);
        api("POST", "/api/reset").then(function (res) {
          if (!res.ok) { faultsStatus([badge(String(res.status), "bad"), " " + problemText(res.status, res.body)]); return; }
          faultsStatus([badge("reset", "ok"), " Keys, charges and the timeline are cleared; every switch is off."]);
        });
      }
    });
  }

  // ------------------------------------------------------------- "you"

  // Mark this browser's rows in every live panel: the panels are shared by
  // the whole room, so only this page knows which "browser 2b03" is its
  // own. Rows arrive by the event stream; an observer marks each swap.
  function markYou(root, label) {
    var pending = false;
    function mark() {
      pending = false;
      var cells = root.querySelectorAll(".who, td, .muted");
      for (var i = 0; i < cells.length; i++) {
        var mine = cells[i].children.length === 0 && cells[i].textContent.trim() === label;
        if (mine !== cells[i].classList.contains("is-you")) { cells[i].classList.toggle("is-you", mine); }
      }
    }
    new MutationObserver(function () {
      if (!pending) { pending = true; setTimeout(mark, 0); }
    }).observe(root, { childList: true, subtree: true });
    mark();
  }

  // ---------------------------------------------------------------- start

  function start() {
    var live = $("live");
    if (live) {
      var serverNow = parseInt(live.getAttribute("data-server-now"), 10);
      if (!isNaN(serverNow)) { clockSkew = serverNow - Date.now(); }
      // The demo clock moves when the presenter warps it or resets: lab.js
      // passes it on after each change of the room.
      document.addEventListener("paytwice:clock", function (ev) {
        clockSkew = ev.detail.now - Date.now();
        tickAges();
      });
      setInterval(tickAges, 1000);
    }
    var card = $("checkout");
    if (card) { initCheckout(card); }
    if (card && live && card.getAttribute("data-you")) { markYou(live, card.getAttribute("data-you")); }
    initFaults();
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();

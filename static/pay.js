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
  var clockSkew = 0; // server clock minus this browser's clock, in ms

  function setStreamState(text, tone) {
    var s = $("stream-state");
    if (!s) { return; }
    s.textContent = "";
    s.appendChild(badge(text, tone));
  }

  if (window.htmx) {
    // A reconnect after a failure makes a new EventSource, which would not
    // send Last-Event-ID: put the last id seen into ?since= instead.
    window.htmx.createEventSource = function (url) {
      if (lastEventID !== null) {
        url = url.replace(/([?&]since=)\d+/, "$1" + lastEventID);
      }
      var es = new EventSource(url, { withCredentials: true });
      es.addEventListener("frame", function (e) {
        if (e.lastEventId) { lastEventID = e.lastEventId; }
      });
      es.addEventListener("open", function () { setStreamState("live", "ok"); });
      es.addEventListener("error", function () { setStreamState("reconnecting", "warn"); });
      return es;
    };
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

  function initCheckout(card) {
    var cfg = {
      base: parseInt(card.getAttribute("data-backoff-base-ms"), 10) || 500,
      cap: parseInt(card.getAttribute("data-backoff-cap-ms"), 10) || 8000,
      retries: parseInt(card.getAttribute("data-max-retries"), 10),
    };
    if (isNaN(cfg.retries)) { cfg.retries = 5; }

    var action = load(ACTION_KEY);
    if (!action || !action.key || !action.orderId || !(action.amount > 0)) {
      action = {
        orderId: card.getAttribute("data-order-id"),
        amount: parseInt(card.getAttribute("data-amount"), 10),
        key: card.getAttribute("data-key"),
      };
    }
    action.paid = action.paid || null;
    var opts = load(OPTIONS_KEY) || { guard: false, retry: false, newKey: false };
    var inflight = 0;
    var clicks = 0;

    var pay = $("pay"), amount = $("amount"), attempts = $("attempts"), status = $("pay-status"), explain = $("pay-explain");

    function save() { store(ACTION_KEY, action); }

    function drawAction() {
      $("order-id").textContent = action.orderId;
      $("key-full").textContent = action.key;
      $("key-short").textContent = shortKey(action.key);
      $("pay-amount").textContent = formatBaht(action.amount);
      $("amount-satang").textContent = String(action.amount);
      if (parseBaht(amount.value) !== action.amount) { amount.value = formatBaht(action.amount); }
    }

    function drawGuard() {
      pay.disabled = opts.guard && inflight > 0;
      pay.setAttribute("aria-busy", inflight > 0 ? "true" : "false");
    }

    function setStatus(state, nodes) {
      status.setAttribute("data-state", state);
      status.textContent = "";
      for (var i = 0; i < nodes.length; i++) {
        status.appendChild(typeof nodes[i] === "string" ? document.createTextNode(nodes[i]) : nodes[i]);
      }
    }

    function setExplain(nodes) {
      explain.textContent = "";
      if (!nodes) { explain.hidden = true; return; }
      explain.hidden = false;
      for (var i = 0; i < nodes.length; i++) {
        explain.appendChild(typeof nodes[i] === "string" ? document.createTextNode(nodes[i]) : nodes[i]);
      }
    }

    function drawPaid() {
      if (action.paid) {
        setStatus("paid", [badge("paid", "ok"), " Paid \u0e3f" + formatBaht(action.paid.amount) + " for order " + action.orderId + ". Charge ",
          el("code", "", action.paid.charge || "?"), "."]);
      }
    }

    // ---- one click: a request, and its retries when they are on

    function logAttempt(click, attempt, label) {
      var li = el("li", "attempt");
      li.appendChild(el("span", "who", "click " + click + (label ? " \u00b7 " + label : "") + (attempt > 0 ? " \u00b7 retry " + attempt : "")));
      var what = el("span", "what", " sending\u2026");
      li.appendChild(what);
      attempts.insertBefore(li, attempts.firstChild);
      while (attempts.children.length > 30) { attempts.removeChild(attempts.lastChild); }
      return { li: li, what: what };
    }

    function describe(row, res) {
      row.what.textContent = " ";
      if (res.network) {
        row.li.setAttribute("data-status", "network");
        row.what.appendChild(badge("no response", "bad"));
        row.what.appendChild(document.createTextNode(" " + res.network));
        return;
      }
      row.li.setAttribute("data-status", String(res.status));
      var tone = res.status < 300 ? "ok" : (res.status === 409 || res.status === 429 ? "warn" : "bad");
      row.what.appendChild(badge(String(res.status), tone));
      var words = res.status < 300 ? (res.replayed ? "replayed: the saved answer, nothing charged again" : "created")
        : ((res.body && res.body.title) || "error");
      row.what.appendChild(document.createTextNode(" " + words));
    }

    function countdown(row, ms, n, ceiling) {
      var wait = el("span", "wait");
      row.li.appendChild(wait);
      var until = Date.now() + ms;
      return new Promise(function (resolve) {
        function tick() {
          var left = Math.max(0, until - Date.now());
          wait.textContent = " \u2192 retry " + n + " in " + (left / 1000).toFixed(2) + " s (drawn from 0\u2013" + (ceiling / 1000).toFixed(2) + " s)";
          if (left <= 0) { clearInterval(timer); wait.textContent = " \u2192 waited " + (ms / 1000).toFixed(2) + " s"; resolve(); }
        }
        var timer = setInterval(tick, 50);
        tick();
      });
    }

    function send(req) {
      var ctl = new AbortController();
      var timer = setTimeout(function () { ctl.abort(); }, ATTEMPT_TIMEOUT_MS);
      return fetch("/v1/payments", {
        method: "POST",
        headers: { "Content-Type": "application/json", "Idempotency-Key": req.key, "Accept": "application/json" },
        body: JSON.stringify({ order_id: req.orderId, amount_satang: req.amount }),
        credentials: "same-origin",
        cache: "no-store",
        signal: ctl.signal,
      }).then(function (r) {
        return r.text().then(function (text) {
          var body = null;
          try { body = JSON.parse(text); } catch (e) { /* not JSON */ }
          return { status: r.status, body: body, replayed: r.headers.get("Idempotent-Replayed") === "true", retryAfter: r.headers.get("Retry-After") };
        });
      }, function (err) {
        return { network: err && err.name === "AbortError" ? "timed out" : "the connection failed" };
      }).finally(function () { clearTimeout(timer); });
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
    function changeKey(key) {
      action.key = key;
      save();
      drawAction();
    }

    // A 400 or a 422 is the same answer however often it is sent.
    function refused(res) {
      return res.status >= 400 && res.status < 500 && res.status !== 409 && res.status !== 429;
    }

    function retryable(res) {
      if (labOn("retry_every_4xx") && refused(res)) { return true; } // the mistake, on purpose
      return !!res.network || res.status === 409 || res.status === 429 || res.status >= 500;
    }

    // One request and, when retrying is on, its retries. Every answer
    // that only repeats a refusal the page already had is marked wasted.
    async function sendWithRetries(n, req, label) {
      var retrying = opts.retry || labOn("new_key_per_retry") || labOn("retry_every_4xx");
      var refusals = 0;
      var wasted = 0;
      for (var attempt = 0; ; attempt++) {
        if (attempt > 0 && labOn("new_key_per_retry")) {
          // The mistake, on purpose: every retry gets a fresh key, so the
          // server cannot know it is the same payment.
          req.key = uuid();
          changeKey(req.key);
        }
        var row = logAttempt(n, attempt, label);
        var res = await send(req);
        describe(row, res);
        row.li.setAttribute("data-key", req.key);
        if (refused(res) && ++refusals > 1) {
          wasted++;
          row.li.setAttribute("data-wasted", "true");
          row.what.appendChild(document.createTextNode(" "));
          row.what.appendChild(badge("wasted", "bad"));
        }
        if (!retryable(res) || !retrying || attempt >= cfg.retries) {
          res.wasted = wasted;
          return res;
        }
        var ceiling = Math.min(cfg.cap, cfg.base * Math.pow(2, attempt));
        var wait = Math.random() * ceiling;
        var ra = parseInt(res.retryAfter || "", 10);
        if (!isNaN(ra) && ra * 1000 > wait) { wait = ra * 1000; }
        setStatus("waiting", [badge("retrying", "warn"), labOn("new_key_per_retry") ?
          " No final answer yet; retrying soon, under a new key." : " No final answer yet; sending the same key again soon."]);
        await countdown(row, wait, attempt + 1, ceiling);
      }
    }

    // After a final 500 the charge may have happened. The right move is to
    // look the order up; the lab's mistake pays again under a new key.
    async function after500(n, req, res) {
      if (labOn("new_key_after_500")) {
        // The mistake, on purpose: give up on the key and pay again.
        setStatus("waiting", [badge("500", "bad"), " The server failed; paying again under a new key."]);
        req.key = uuid();
        changeKey(req.key);
        var again = await sendWithRetries(n, req, "new key after 500");
        again.afterNewKey = true;
        return again;
      }
      setStatus("waiting", [badge("500", "bad"), " The server failed after it started: looking the order up before anything else."]);
      var li = el("li", "attempt reconcile");
      li.setAttribute("data-kind", "reconcile");
      li.appendChild(el("span", "who", "click " + n + " \u00b7 look-up"));
      var what = el("span", "what", " GET /v1/payments?order_id=" + req.orderId + "\u2026");
      li.appendChild(what);
      attempts.insertBefore(li, attempts.firstChild);
      var found = await fetch("/v1/payments?order_id=" + encodeURIComponent(req.orderId), {
        credentials: "same-origin", cache: "no-store", headers: { "Accept": "application/json" },
      }).then(function (r) { return r.ok ? r.json() : null; }, function () { return null; });
      var charges = (found && found.charges) || [];
      what.textContent = " ";
      if (charges.length > 0) {
        var ch = charges[charges.length - 1];
        li.setAttribute("data-paid", "true");
        what.appendChild(badge("paid", "ok"));
        what.appendChild(document.createTextNode(" the order is already paid (" + ch.charge_id + "): nothing sent again"));
        return { status: 200, reconciled: true, body: { status: "paid", charge_id: ch.charge_id } };
      }
      li.setAttribute("data-paid", "false");
      what.appendChild(badge("not paid", "mute"));
      what.appendChild(document.createTextNode(" no charge for this order yet"));
      return res;
    }

    async function click() {
      var n = ++clicks;
      if (opts.newKey) {
        // The mistake, on purpose: a fresh key for the same order.
        changeKey(uuid());
      }
      if (labOn("personal_data_key") && action.key !== personalKey()) {
        // The mistake, on purpose: the customer's e-mail address as the key.
        changeKey(personalKey());
      }
      var amt = parseBaht(amount.value);
      if (amt === null) {
        setStatus("invalid", [badge("amount", "bad"), " Type an amount in baht, like 1,299.00."]);
        return;
      }
      var req = { key: action.key, orderId: action.orderId, amount: amt };
      inflight++;
      drawGuard();
      try {
        var res = await sendWithRetries(n, req, "");
        if (res.status === 500) {
          res = await after500(n, req, res);
        }
        finish(req, res);
      } finally {
        inflight--;
        drawGuard();
      }
    }

    function wastedNote(res) {
      if (!res.wasted) { return []; }
      return [" ", badge(res.wasted + " wasted", "bad"), " " + res.wasted + (res.wasted === 1 ? " retry" : " retries") +
        " got the same answer: sending a " + res.status + " again never changes it."];
    }

    function finish(req, res) {
      if (req.orderId !== action.orderId) {
        return; // an earlier order's request, answered after New order: its row above says how it ended
      }
      if (res.status === 201 || (res.status === 200 && res.body && res.body.status === "paid")) {
        action.paid = { amount: req.amount, charge: res.body && res.body.charge_id, key: req.key };
        save();
        drawPaid();
        if (res.replayed) {
          status.appendChild(document.createTextNode(" The server replayed its saved answer (Idempotent-Replayed: true)."));
        }
        if (res.reconciled) {
          status.appendChild(document.createTextNode(" The 500 had charged: looking the order up showed it, so nothing was paid twice."));
        }
        setExplain(null);
        return;
      }
      if (res.status === 422) {
        setStatus("mismatch", [badge("422", "bad"), " Refused: this key was already used for a different request."].concat(wastedNote(res)));
        setExplain([el("strong", "", "Why 422? "),
          "You changed the amount but kept the order's key. The key stands for one action, and the server remembers what that action was (its fingerprint), so it will neither replay the old answer nor run a new charge. Retrying cannot help; a new payment needs a new key: press New order. ",
          link("/problems/key-reused", "More about 422 key reused")]);
        return;
      }
      if (action.paid && (res.network || res.status === 409)) {
        drawPaid(); // a slower click ended after the payment went through
        return;
      }
      if (res.network) {
        setStatus("unknown", [badge("no response", "bad"), " The request may or may not have charged. Paying again with the same key is safe: the server will run it at most once."]);
        setExplain(null);
        return;
      }
      var b = res.body || {};
      var tone = res.status === 409 || res.status === 429 ? "warn" : "bad";
      setStatus("error", [badge(String(res.status), tone), " " + (b.title || "Error") + ". " + (b.detail || "")].concat(wastedNote(res)));
      if (res.afterNewKey) {
        setExplain([el("strong", "", "Paid twice. "),
          "The first 500 came after the charge, and the page paid again under a new key instead of looking the order up. Compare the charges for order " + req.orderId + ". ",
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

    // ---- wiring

    pay.addEventListener("click", function () { click(); });

    $("new-order").addEventListener("click", function () {
      action = { orderId: newOrderID(), amount: action.amount, key: uuid(), paid: null };
      save();
      drawAction();
      attempts.textContent = "";
      setExplain(null);
      setStatus("ready", [badge("ready", "mute"), " New order, new key. Nothing sent yet."]);
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
    if (action.paid && action.paid.key === action.key) { drawPaid(); }
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
    if (status === 403) { return "Refused by the server (403): only the presenter may change this."; }
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
          var n = res.body && res.body.closed ? res.body.closed.length : 0;
          var secs = res.body ? res.body.lock_timeout_seconds : "?";
          faultsStatus([badge("swept", "ok"), " Closed " + n + " stuck key" + (n === 1 ? "" : "s") + ". Keys started less than " + secs + " s ago are left alone: their request may still be running."]);
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

  // ---------------------------------------------------------------- start

  function start() {
    var live = $("live");
    if (live) {
      var serverNow = parseInt(live.getAttribute("data-server-now"), 10);
      if (!isNaN(serverNow)) { clockSkew = serverNow - Date.now(); }
      setInterval(tickAges, 1000);
    }
    var card = $("checkout");
    if (card) { initCheckout(card); }
    initFaults();
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();

// api.js: the one JSON call the live pages' scripts share. It sends the
// presenter's cookie along, never throws, and always resolves to
// {status, ok, body}: status 0 when the server could not be reached, body
// null when the answer was not JSON.
window.paytwiceAPI = function (method, path, payload) {
  "use strict";
  var init = { method: method, credentials: "same-origin", cache: "no-store", headers: { "Accept": "application/json" } };
  if (payload !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(payload);
  }
  return fetch(path, init).then(function (r) {
    return r.text().then(function (t) {
      var body = null;
      try { body = JSON.parse(t); } catch (e) { /* not JSON */ }
      return { status: r.status, ok: r.ok, body: body };
    });
  }, function () { return { status: 0, ok: false, body: { detail: "the server could not be reached" } }; });
};

// paytwiceNotPresenter is what a page says when the server refused a
// presenter's action (403). A board drawn for the presenter gets it only
// when the server no longer recognises this browser: it was restarted with
// another presenter token, or the cookie ran out. The fix is the link.
window.paytwiceNotPresenter = function () {
  "use strict";
  var board = document.getElementById("board") || document.querySelector("[data-presenter]");
  if (board && board.getAttribute("data-presenter") === "true") {
    return "Refused (403): the server no longer recognises this browser as the presenter (it was started with another presenter token, or the sign-in ran out). Open the presenter's link that paytwice printed when it started (/board?token=\u2026), then try again.";
  }
  return "Refused (403): only the presenter may change this. The presenter opens the board with the link paytwice printed when it started (/board?token=\u2026).";
};

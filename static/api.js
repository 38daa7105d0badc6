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

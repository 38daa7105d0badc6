// morph.js: patches a part of a page that the server drew anew into the
// part on the screen (lab.js's panels, predict.js's vote), keeping its
// elements. A panel replaced whole (innerHTML) loses what a person is
// doing in it: a tap whose finger went down on a button and came up on
// its replacement makes no click, and a field being typed in loses its
// text and focus. window.paytwiceMorph(old, fresh, keep) makes old look
// like fresh; keep says that a control changed in this page and not yet
// drawn by the server keeps its value.
(function () {
  "use strict";

  function isControl(n) { return n.nodeName === "INPUT" || n.nodeName === "SELECT" || n.nodeName === "TEXTAREA"; }

  // edited reports whether a control's value differs from the value the
  // server drew: someone changed it in this page, and the server has not
  // drawn that change (yet).
  function edited(c) {
    if (c.type === "checkbox" || c.type === "radio") { return c.checked !== c.defaultChecked; }
    if (c.nodeName === "SELECT") {
      var drawn = c.querySelector("option[selected]") || c.options[0];
      return !!drawn && c.value !== drawn.value;
    }
    return c.value !== c.defaultValue;
  }

  // morph makes old look like fresh while keeping old's elements: a
  // control somebody is about to click, or is typing in, stays the same
  // element, keeps its focus, and keeps a value they changed that the
  // server has not drawn yet (keep). Once the server has the change it
  // draws the same value and the control is no longer "edited".
  function morph(old, fresh, keep) {
    if (old.nodeType !== fresh.nodeType || old.nodeName !== fresh.nodeName ||
        (old.nodeType === 1 && old.id !== fresh.id)) {
      old.replaceWith(fresh.cloneNode(true));
      return;
    }
    if (old.nodeType !== 1) {
      if (old.nodeValue !== fresh.nodeValue) { old.nodeValue = fresh.nodeValue; }
      return;
    }
    var mine = keep && isControl(old) && edited(old);
    var i;
    for (i = old.attributes.length - 1; i >= 0; i--) {
      var name = old.attributes[i].name;
      // A <details> stays as the reader left it.
      if (!fresh.hasAttribute(name) && !(name === "open" && old.nodeName === "DETAILS")) { old.removeAttribute(name); }
    }
    for (i = 0; i < fresh.attributes.length; i++) {
      var a = fresh.attributes[i];
      if (a.name === "open" && old.nodeName === "DETAILS") { continue; }
      if (old.getAttribute(a.name) !== a.value) { old.setAttribute(a.name, a.value); }
    }
    var oc = old.childNodes;
    var fc = fresh.childNodes;
    for (i = 0; i < fc.length; i++) {
      if (i < oc.length) { morph(oc[i], fc[i], keep); } else { old.appendChild(fc[i].cloneNode(true)); }
    }
    while (oc.length > fc.length) { old.removeChild(old.lastChild); }
    if (isControl(old) && !mine) {
      if (old.type === "checkbox" || old.type === "radio") {
        old.checked = old.defaultChecked;
      } else if (old.nodeName === "SELECT") {
        var drawn = old.querySelector("option[selected]") || old.options[0];
        if (drawn) { old.value = drawn.value; }
      } else {
        old.value = old.defaultValue;
      }
    }
  }

  window.paytwiceMorph = morph;
})();

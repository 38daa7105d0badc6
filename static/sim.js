// sim.js: the backoff and herd forms. After each answer, a field whose
// message slot has text is marked aria-invalid, so a screen reader says
// which field is wrong (the slots arrive out of band; the inputs stay put
// so that typing is never interrupted).
(function () {
  "use strict";
  function mark() {
    var slots = document.querySelectorAll(".sim-form .field-error");
    for (var i = 0; i < slots.length; i++) {
      var field = slots[i].closest(".field");
      var input = field && field.querySelector("input, select");
      if (!input) { continue; }
      if (slots[i].textContent.trim() !== "") {
        input.setAttribute("aria-invalid", "true");
      } else {
        input.removeAttribute("aria-invalid");
      }
    }
  }
  document.addEventListener("htmx:afterSettle", mark);
  document.addEventListener("htmx:oobAfterSwap", mark);
})();

// firesafe dashboard: the little behaviour htmx does not cover. No inline scripts anywhere (CSP).
(function () {
  "use strict";

  function selectionForm(el) {
    return el.closest("form");
  }

  function refreshSelection(form) {
    if (!form) return;
    var boxes = form.querySelectorAll('input[type=checkbox][name=key]');
    var n = 0;
    boxes.forEach(function (b) { if (b.checked) n += 1; });
    form.querySelectorAll("[data-needs-selection]").forEach(function (btn) { btn.disabled = n === 0; });
    var label = form.querySelector("[data-selection-count]");
    if (label) label.textContent = n ? n + " selected" : "tick jobs to act on them";
    var all = form.querySelector("[data-select-all]");
    if (all) {
      all.checked = n > 0 && n === boxes.length;
      all.indeterminate = n > 0 && n < boxes.length;
    }
  }

  document.addEventListener("change", function (ev) {
    var t = ev.target;
    if (!(t instanceof HTMLInputElement) || t.type !== "checkbox") return;
    var form = selectionForm(t);
    if (t.hasAttribute("data-select-all") && form) {
      form.querySelectorAll('input[type=checkbox][name=key]').forEach(function (b) { b.checked = t.checked; });
    }
    refreshSelection(form);
  });

  function init(root) {
    (root || document).querySelectorAll("form#selection").forEach(refreshSelection);
  }

  document.addEventListener("DOMContentLoaded", function () { init(document); });
  document.addEventListener("htmx:afterSettle", function () { init(document); });
  // After a preview lands, bring it into view.
  document.addEventListener("htmx:afterSwap", function (ev) {
    if (ev.target && ev.target.id === "confirm" && ev.target.scrollIntoView) {
      ev.target.scrollIntoView({ block: "start" });
    }
  });
})();

// A secret shown once (a new API token): a click in its read-only field selects all of it, and the Copy
// button puts it on the clipboard (the Clipboard API; where that is refused, the selection and the
// browser's copy command), saying what happened in the status line beside it.
(function () {
  "use strict";
  document.querySelectorAll("input[data-select-all]").forEach(function (field) {
    field.addEventListener("focus", function () { field.select(); });
    field.addEventListener("click", function () { field.select(); });
  });
  document.querySelectorAll("button[data-copy]").forEach(function (button) {
    const field = document.getElementById(button.dataset.copy);
    const status = document.querySelector("[data-copy-status]");
    function say(text) { if (status) status.textContent = text; }
    function byHand() {
      field.select();
      say(document.execCommand && document.execCommand("copy")
        ? "Copied to the clipboard."
        : "Selected: press Ctrl+C (⌘C) to copy.");
    }
    button.addEventListener("click", function () {
      if (!navigator.clipboard) return byHand();
      navigator.clipboard.writeText(field.value)
        .then(function () { say("Copied to the clipboard."); })
        .catch(byHand);
    });
  });
})();

// A card wider than a small screen scrolls sideways inside itself, never the page. Keyboard users
// must reach that scroll too: such a card takes focus, named by its heading (axe-core's
// scrollable-region-focusable). Cards are checked again when the window or the page's content changes.
(function () {
  "use strict";

  function mark() {
    document.querySelectorAll(".card").forEach(function (card) {
      var scrolls = card.scrollWidth > card.clientWidth + 1;
      if (scrolls && card.dataset.scrolls !== "yes") {
        var heading = card.querySelector("h1, h2, h3");
        card.dataset.scrolls = "yes";
        card.tabIndex = 0;
        card.setAttribute("role", "region");
        card.setAttribute("aria-label", (heading ? heading.textContent.trim() : "Section") + " (scrolls sideways)");
      } else if (!scrolls && card.dataset.scrolls === "yes") {
        delete card.dataset.scrolls;
        card.removeAttribute("tabindex");
        card.removeAttribute("role");
        card.removeAttribute("aria-label");
      }
    });
  }

  var pending = null;
  function soon() {
    if (pending === null) {
      pending = window.requestAnimationFrame(function () { pending = null; mark(); });
    }
  }

  window.addEventListener("resize", soon);
  document.addEventListener("DOMContentLoaded", function () {
    mark();
    new MutationObserver(soon).observe(document.querySelector("main"), { childList: true, subtree: true });
  });
  window.addEventListener("load", mark);
})();

// The live streams on the page: a websocket that reconnects with exponential backoff (shown to the
// user), and in-place refreshes of the page's [data-live-region] parts when a state change arrives.
(function () {
  "use strict";
  const REFUSED = { 4401: "sign in again to see live updates", 4403: "live updates are not open to you" };
  const MAX_DELAY_S = 30;

  function statusLine() {
    let line = document.getElementById("live-status");
    if (!line) {
      line = document.createElement("span");
      line.id = "live-status";
      line.className = "live-status floating muted small";
      line.setAttribute("role", "status");
      document.body.appendChild(line);
    }
    return line;
  }

  // connect(path, handlers): handlers.snapshot / tick / event / error receive the parsed frames.
  function connect(path, handlers) {
    const line = statusLine();
    let attempt = 0;
    let countdown = null;

    function say(text, state) {
      line.textContent = text;
      line.dataset.state = state;
    }

    function open() {
      const scheme = location.protocol === "https:" ? "wss://" : "ws://";
      const socket = new WebSocket(scheme + location.host + path);
      socket.onopen = function () {
        attempt = 0;
        say("● live", "open");
      };
      socket.onmessage = function (message) {
        const frame = JSON.parse(message.data);
        const handle = handlers[frame.type];
        if (handle) handle(frame);
      };
      socket.onclose = function (closed) {
        if (REFUSED[closed.code]) {
          say("Not live: " + REFUSED[closed.code] + ".", "refused");
          return;
        }
        retryLater();
      };
    }

    function retryLater() {
      let left = Math.min(MAX_DELAY_S, Math.pow(2, attempt));
      attempt += 1;
      clearInterval(countdown);
      say("Connection lost; reconnecting in " + left + " s…", "reconnecting");
      countdown = setInterval(function () {
        left -= 1;
        if (left > 0) {
          say("Connection lost; reconnecting in " + left + " s…", "reconnecting");
          return;
        }
        clearInterval(countdown);
        say("Reconnecting…", "reconnecting");
        open();
      }, 1000);
    }

    open();
  }

  // Fetch this page again and swap each [data-live-region] (by id) for its new content; calls made
  // within 300 ms share one fetch, and a call while a fetch is under way gets one more after it.
  let pending = null;
  let again = false;
  function refreshRegions(after) {
    if (pending) {
      again = true;
      return;
    }
    pending = setTimeout(function () {
      fetch(location.href, { credentials: "same-origin", headers: { "X-Requested-With": "live" } })
        .then(function (response) { return response.ok ? response.text() : Promise.reject(response.status); })
        .then(function (html) {
          const fresh = new DOMParser().parseFromString(html, "text/html");
          document.querySelectorAll("[data-live-region]").forEach(function (region) {
            const replacement = fresh.getElementById(region.id);
            if (replacement) region.innerHTML = replacement.innerHTML;
          });
          if (after) after();
        })
        .catch(function () { /* the next change or tick tries again */ })
        .finally(function () {
          pending = null;
          if (again) {
            again = false;
            refreshRegions(after);
          }
        });
    }, 300);
  }

  window.PortalLive = { connect: connect, refreshRegions: refreshRegions };
})();

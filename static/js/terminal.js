// The browser terminal: xterm.js on a websocket to the portal's session relay
// (scheduler_app/live/sessions.py). Binary frames carry the terminal's bytes; JSON text frames the
// control: open and resize from here, exit and error from the allocation.
(function () {
  "use strict";
  const box = document.getElementById("terminal");
  const status = document.getElementById("terminal-status");
  const term = new Terminal({ cursorBlink: true, scrollback: 5000, fontSize: 14 });
  const fit = new FitAddon.FitAddon();
  term.loadAddon(fit);
  term.open(box);
  fit.fit();
  window.portalTerminal = term; // for the browser test: what the terminal shows

  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const socket = new WebSocket(scheme + "//" + location.host + box.dataset.socket);
  socket.binaryType = "arraybuffer";
  const encoder = new TextEncoder();

  function control(message) {
    if (socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify(message));
  }

  socket.onopen = function () {
    control({ type: "open", kind: "terminal", tty: true, cols: term.cols, rows: term.rows });
    status.textContent = "Connected";
    term.focus();
  };
  socket.onmessage = function (event) {
    if (typeof event.data !== "string") {
      term.write(new Uint8Array(event.data));
      return;
    }
    const message = JSON.parse(event.data);
    if (message.type === "exit") status.textContent = "Exited with status " + message.status;
    if (message.type === "error") status.textContent = message.message;
  };
  socket.onclose = function (event) {
    if (!status.textContent.startsWith("Exited") && event.code !== 4000) {
      status.textContent = event.code === 4401 ? "Closed: signed out or no longer allowed" : "Disconnected";
    }
    term.options.disableStdin = true;
  };

  term.onData(function (data) {
    if (socket.readyState === WebSocket.OPEN) socket.send(encoder.encode(data));
  });
  term.onResize(function (size) {
    control({ type: "resize", cols: size.cols, rows: size.rows });
  });
  window.addEventListener("resize", function () { fit.fit(); });

  // Ctrl+Shift+C copies the selection, Ctrl+Shift+V pastes (Ctrl+C stays the terminal's interrupt).
  // The paste is the browser's own: xterm.js takes the paste event the shortcut raises (reading the
  // clipboard here as well pasted the text twice).
  term.attachCustomKeyEventHandler(function (event) {
    if (event.type !== "keydown" || !event.ctrlKey || !event.shiftKey) return true;
    if (event.code === "KeyC" && term.hasSelection()) {
      navigator.clipboard.writeText(term.getSelection());
      return false;
    }
    return event.code !== "KeyV";
  });
})();

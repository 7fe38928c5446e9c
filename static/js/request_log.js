// Tails the job's log on the request page: asks for what lies past the last offset read, every 2 s,
// until the request has ended and nothing new came.
(function () {
  const box = document.getElementById("job-log");
  if (!box) return;
  const status = document.getElementById("job-log-status");
  const ended = new Set(["succeeded", "failed", "cancelled", "preempted", "released"]);
  let after = 0;

  async function poll() {
    let body;
    try {
      const response = await fetch(`${box.dataset.url}?after=${after}`, {credentials: "same-origin"});
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      body = await response.json();
    } catch (error) {
      status.textContent = `Cannot read the log (${error.message}); trying again.`;
      setTimeout(poll, 5000);
      return;
    }
    if (body.text) {
      const atBottom = box.scrollTop + box.clientHeight >= box.scrollHeight - 4;
      box.textContent += body.text;
      if (atBottom) box.scrollTop = box.scrollHeight;
    }
    after = body.end;
    if (ended.has(body.state) && !body.text) {
      const exit = body.exit_code === null ? "" : `, exit status ${body.exit_code}`;
      status.textContent = `The request is ${body.state}${exit}.`;
      return;
    }
    status.textContent = after ? "Tailing the log…" : "No output yet.";
    setTimeout(poll, 2000);
  }
  poll();
})();

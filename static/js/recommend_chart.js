// The request form's "Which share to take": ask the API (POST /api/v1/requests/recommend/, with the session
// and its CSRF token) for the time/cost options of the form's workload, draw them (x: predicted hours with
// the band as error bars, y: USD; the Pareto front as a line), say the pick, and let the user take its share.
(function () {
  "use strict";
  const form = document.getElementById("request-form");
  const card = document.getElementById("recommendation");
  if (!form || !card) return;
  const chart = document.getElementById("recommend-chart");
  const text = document.getElementById("recommend-text");
  const apply = document.getElementById("recommend-apply");
  const deadline = document.getElementById("recommend-deadline");
  const budget = document.getElementById("recommend-budget");
  const teamSlugs = JSON.parse(document.getElementById("team-slugs").textContent);
  let chosen = null;

  function body() {
    const f = form.elements;
    const checked = form.querySelector("input[name=task_type]:checked");
    const data = {
      team: teamSlugs[f.team.value] || "",
      task_type: checked ? checked.value : "training",
      command: f.command.value,
      workload_key: f.workload_key.value,
      name: f.name.value,
      pool: f.pool.value,
      gpu_model: f.gpu_model.value,
    };
    const hours = Number(f.max_duration_h.value);
    if (f.max_duration_h.value.trim() !== "" && hours > 0) data.max_duration_s = Math.round(hours * 3600);
    if (deadline.value.trim() !== "") data.deadline_s = Math.round(Number(deadline.value) * 3600) || deadline.value;
    if (budget.value.trim() !== "") data.budget_usd = budget.value.trim();
    return data;
  }

  function shareLabel(o) {
    return o.num_gpus > 1 ? o.num_gpus + " GPUs" : o.gpu_milli / 1000 + " GPU";
  }

  function trace(options, kind, color) {
    const mine = options.filter(function (o) { return o.capacity_type === kind; });
    return {
      name: kind, type: "scatter", mode: "markers", marker: { color: color, size: 8 },
      x: mine.map(function (o) { return o.runtime_s / 3600; }),
      y: mine.map(function (o) { return Number(o.cost_usd); }),
      text: mine.map(shareLabel),
      hovertemplate: "%{text}<br>%{x:.2f} h<br>$%{y:.2f}<extra>" + kind + "</extra>",
      error_x: {
        type: "data", symmetric: false, thickness: 1, width: 0, color: color,
        array: mine.map(function (o) { return (o.runtime_high_s - o.runtime_s) / 3600; }),
        arrayminus: mine.map(function (o) { return (o.runtime_s - o.runtime_low_s) / 3600; }),
      },
    };
  }

  function draw(answer) {
    const front = answer.options.filter(function (o) { return o.pareto; })
      .sort(function (a, b) { return a.runtime_s - b.runtime_s; });
    const traces = [
      trace(answer.options, "on-demand", "#3367d6"),
      trace(answer.options, "spot", "#2e9d5b"),
      { name: "Pareto front", type: "scatter", mode: "lines", line: { color: "#888", dash: "dot" },
        x: front.map(function (o) { return o.runtime_s / 3600; }),
        y: front.map(function (o) { return Number(o.cost_usd); }), hoverinfo: "skip" },
    ];
    if (answer.chosen) {
      traces.push({ name: "recommended", type: "scatter", mode: "markers",
        marker: { symbol: "star", size: 16, color: "#d9822b" },
        x: [answer.chosen.runtime_s / 3600], y: [Number(answer.chosen.cost_usd)], hoverinfo: "skip" });
    }
    if (window.Plotly) {
      Plotly.react(chart, traces, {
        height: 260, margin: { l: 50, r: 10, t: 10, b: 40 },
        xaxis: { title: { text: "predicted hours (log)" }, type: "log" }, yaxis: { title: { text: "USD" } },
        legend: { orientation: "h" },
      }, { displayModeBar: false, responsive: true });
    }
  }

  function render(ok, answer) {
    if (!ok) {
      const fields = (answer.error && answer.error.fields) || {};
      const problems = Object.entries(fields).map(function ([field, messages]) {
        return field + ": " + [].concat(messages).join(" ");
      });
      text.textContent = problems.join(" · ") || (answer.error && answer.error.message) || "Not available.";
      apply.hidden = true;
      return;
    }
    const sources = { history: "its earlier runs", utilization: "its measured utilization", prior: "the task type's prior" };
    text.textContent = answer.reason + " Predicted from " + (sources[answer.curve.source] || answer.curve.source) + ".";
    chosen = answer.chosen;
    apply.hidden = !chosen;
    if (chosen) apply.textContent = "Use " + shareLabel(chosen) + " on " + chosen.capacity_type;
    draw(answer);
  }

  // Take the pick's share and billing into the form (its own input handler then re-estimates).
  apply.addEventListener("click", function () {
    if (!chosen) return;
    const option = Array.from(form.elements.share.options).find(function (o) {
      return Number(o.dataset.gpuMilli) === chosen.gpu_milli && Number(o.dataset.numGpus) === chosen.num_gpus;
    });
    if (option) form.elements.share.value = option.value;
    const billing = form.querySelector('input[name=billing_mode][value="' + chosen.capacity_type + '"]');
    if (billing) billing.checked = true;
    form.dispatchEvent(new Event("change"));
    // Spot needs a checkpoint interval that only the user knows: take them to it.
    const interval = form.elements.checkpoint_interval_min;
    if (chosen.capacity_type === "spot" && interval.value.trim() === "") interval.focus();
  });

  let timer = null;
  let sequence = 0;
  function ask() {
    const mine = ++sequence;
    fetch(card.dataset.recommendUrl, {
      method: "POST",
      credentials: "same-origin",
      headers: { Accept: "application/json", "Content-Type": "application/json",
        "X-CSRFToken": form.elements.csrfmiddlewaretoken.value },
      body: JSON.stringify(body()),
    })
      .then(function (response) {
        if (response.status !== 200 && response.status !== 400) throw new Error(response.statusText);
        return response.json().then(function (answer) { return [response.ok, answer]; });
      })
      .then(function ([ok, answer]) { if (mine === sequence) render(ok, answer); })
      .catch(function () { text.textContent = "The recommendation is unavailable right now."; });
  }
  function changed() { clearTimeout(timer); timer = setTimeout(ask, 400); }
  form.addEventListener("input", changed);
  deadline.addEventListener("input", changed);
  budget.addEventListener("input", changed);
  ask();
})();

// The request form's "Which share to take": ask the API (POST /api/v1/requests/recommend/, with the session
// and its CSRF token) for the time/cost options of the form's workload, draw them (x: predicted time with
// the band as error bars, y: dollars; one series per capacity type, and per GPU model when the form
// allows several; the Pareto front as a line), say the pick, and let the user take its share.
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
  const COLORS = { "on-demand": "#3367d6", spot: "#2e9d5b" };
  const SYMBOLS = ["circle", "diamond", "square", "triangle-up"];  // one per GPU model
  // Where the time axis may put a tick (hours): round durations a person reads at a glance.
  const TICK_HOURS = [1 / 60, 5 / 60, 15 / 60, 0.5, 1, 2, 4, 8, 12, 24, 48, 96, 168, 336, 720];
  let chosen = null;
  let severalModels = false;

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
    const share = o.num_gpus > 1 ? o.num_gpus + " GPUs" : o.gpu_milli / 1000 + " GPU";
    return share + (severalModels ? " of " + o.gpu_model : "");
  }

  function duration(hours) {
    if (hours < 1) return Math.round(hours * 60) + " min";
    if (hours < 24) return Number(hours.toFixed(1)) + " h";
    return Number((hours / 24).toFixed(1)) + " d";
  }

  function series(options, model, kind, symbol) {
    const mine = options.filter(function (o) { return o.capacity_type === kind && o.gpu_model === model; });
    const hours = mine.map(function (o) { return o.runtime_s / 3600; });
    return {
      name: severalModels ? model + " " + kind : kind, type: "scatter", mode: "markers",
      marker: { color: COLORS[kind], symbol: symbol, size: 8 },
      x: hours, y: mine.map(function (o) { return Number(o.cost_usd); }),
      customdata: mine.map(function (o, i) {
        return [shareLabel(o), duration(hours[i]), window.PortalFormat.usd(o.cost_usd)];
      }),
      hovertemplate: "%{customdata[0]}<br>%{customdata[1]}<br>%{customdata[2]}<extra>" + kind + "</extra>",
      error_x: {
        type: "data", symmetric: false, thickness: 1, width: 0, color: COLORS[kind],
        array: mine.map(function (o) { return (o.runtime_high_s - o.runtime_s) / 3600; }),
        arrayminus: mine.map(function (o) { return (o.runtime_s - o.runtime_low_s) / 3600; }),
      },
    };
  }

  // Log-scale ticks at round durations within the options' bands (plotly's own read "2 5 1 2 5").
  function timeAxis(options) {
    const low = Math.min.apply(null, options.map(function (o) { return o.runtime_low_s / 3600; }));
    const high = Math.max.apply(null, options.map(function (o) { return o.runtime_high_s / 3600; }));
    const ticks = TICK_HOURS.filter(function (h) { return h >= low / 1.5 && h <= high * 1.5; });
    return { title: { text: "predicted time (log scale)" }, type: "log",
      tickmode: "array", tickvals: ticks, ticktext: ticks.map(duration) };
  }

  function draw(answer) {
    if (!window.Plotly) return;
    if (!answer.options.length) {  // nothing priced for this shape: no stale picture either
      Plotly.purge(chart);
      return;
    }
    const models = Array.from(new Set(answer.options.map(function (o) { return o.gpu_model; })));
    const traces = [];
    models.forEach(function (model, i) {
      ["on-demand", "spot"].forEach(function (kind) {
        const trace = series(answer.options, model, kind, SYMBOLS[i % SYMBOLS.length]);
        if (trace.x.length) traces.push(trace);
      });
    });
    const front = answer.options.filter(function (o) { return o.pareto; })
      .sort(function (a, b) { return a.runtime_s - b.runtime_s; });
    traces.push({ name: "Pareto front", type: "scatter", mode: "lines", line: { color: "#888", dash: "dot" },
      x: front.map(function (o) { return o.runtime_s / 3600; }),
      y: front.map(function (o) { return Number(o.cost_usd); }), hoverinfo: "skip" });
    if (answer.chosen) {
      traces.push({ name: "recommended", type: "scatter", mode: "markers",
        marker: { symbol: "star", size: 16, color: "#d9822b" },
        x: [answer.chosen.runtime_s / 3600], y: [Number(answer.chosen.cost_usd)], hoverinfo: "skip" });
    }
    // The legend sits above the plot, clear of the time axis's title under it.
    Plotly.react(chart, traces, {
      height: 320, margin: { l: 60, r: 10, t: 10, b: 45 },
      xaxis: timeAxis(answer.options), yaxis: { title: { text: "cost" }, tickprefix: "$", tickformat: ",.2f" },
      legend: { orientation: "h", x: 0, y: 1.02, yanchor: "bottom", entrywidth: 0.5, entrywidthmode: "fraction",
        font: { size: 11 } },
    }, { displayModeBar: false, responsive: true });
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
    chosen = answer.chosen;
    severalModels = answer.gpu_model === "";
    // The runs learnt from do not tell GPU models apart: say so where models are compared.
    const onEvery = severalModels ? ", the same time on every model" : "";
    text.textContent = answer.reason + " Predicted from " + (sources[answer.curve.source] || answer.curve.source) +
      onEvery + ".";
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
    if (severalModels) form.elements.gpu_model.value = chosen.gpu_model;
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

// A what-if run's page: polls the run (GET /api/v1/what-if/<id>/) for its progress until it is done,
// then draws the actual and the what-if side by side: delays per team, then utilization, unallocated
// GPUs and cost.
(function () {
  "use strict";
  const box = document.getElementById("what-if");
  const POLL_MS = 1000;
  const SIDES = [["actual", "Actual", "#7f8c8d"], ["scenario", "What-if", "#2e86de"]];
  const LAYOUT = {
    margin: { l: 60, r: 10, t: 30, b: 40 }, barmode: "group",
    legend: { orientation: "h", x: 0, y: 1.08, yanchor: "bottom" },
    paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)",
  };

  function show(run) {
    document.getElementById("what-if-status").textContent = run.status[0].toUpperCase() + run.status.slice(1);
    document.getElementById("what-if-progress").value = run.progress;
    document.getElementById("what-if-percent").textContent = run.progress + " %";
    if (run.error) {
      const error = document.getElementById("what-if-error");
      error.textContent = run.error;
      error.hidden = false;
    }
    if (run.status === "succeeded") draw(run.result);
    return run.status === "succeeded" || run.status === "failed";
  }

  function delayTraces(result) {
    const traces = [];
    SIDES.forEach(function ([side, label, color]) {
      [["mean_delay_s", "mean", 0.55], ["p95_delay_s", "p95", 1]].forEach(function ([key, name, opacity]) {
        traces.push({
          type: "bar", name: label + " " + name, x: result.teams, marker: { color: color, opacity: opacity },
          y: result.teams.map(function (t) { const r = result[side].teams[t]; return r ? r[key] : null; }),
          hovertemplate: label + " " + name + " delay, %{x}: %{y:.0f} s<extra></extra>",
        });
      });
    });
    return traces;
  }

  // The time the history covers, as people say it, to the hour beyond a day: "15 minutes", "7 days 4 hours".
  function spoken(seconds) {
    const units = [["day", 86400], ["hour", 3600], ["minute", 60]];
    const step = seconds >= 86400 ? 3600 : 60;
    const parts = [];
    let left = Math.max(60, Math.round(seconds / step) * step);
    units.forEach(function ([name, size]) {
      const n = Math.floor(left / size);
      if (n && parts.length < 2) parts.push(n + " " + name + (n === 1 ? "" : "s"));
      if (n) left -= n * size;
    });
    return parts.join(" ");
  }

  function clusterTraces(result) {
    // Utilization comes as a fraction and is drawn in percent, on its own 0-100 % axis (layout below).
    const panels = [["utilization", "Utilization %", 100], ["unallocated_gpus", "Unallocated GPUs", 1],
      ["cost_usd", "Cost USD", 1]];
    return SIDES.map(function ([side, label, color]) {
      return panels.map(function ([key, title, scale], i) {
        return {
          type: "bar", name: label, legendgroup: side, showlegend: i === 0, marker: { color: color },
          x: [title], y: [Number(result[side][key]) * scale], xaxis: "x" + (i + 1), yaxis: "y" + (i + 1),
          hovertemplate: label + ": %{y:.2f}<extra>" + title + "</extra>",
        };
      });
    }).flat();
  }

  function draw(result) {
    document.getElementById("what-if-results").hidden = false;
    const a = result.actual, s = result.scenario;
    document.getElementById("what-if-summary").textContent =
      result.requests + " requests replayed" + (result.unplaceable ? " (" + result.unplaceable +
      " fit no node of the what-if cluster)" : "") + ". GPUs " + a.gpus + " → " + s.gpus +
      "; p95 delay " + a.p95_delay_s + " s → " + s.p95_delay_s + " s; cost " + a.cost_usd + " → " +
      s.cost_usd + " USD" + (result.covered ? " over the " + spoken(result.covered.seconds) +
      " the history covers (from " + result.covered.start.slice(0, 16).replace("T", " ") + " UTC)" : "") +
      (result.unpriced_pools.length ? "; unpriced: " + result.unpriced_pools.join(", ") : "") + ".";
    document.getElementById("what-if-recommendation").textContent =
      result.recommendation ? result.recommendation.message : "";
    if (!window.Plotly) return;
    const chart = document.getElementById("what-if-delays");
    Plotly.react(chart, delayTraces(result), Object.assign({}, LAYOUT, {
      height: 340, yaxis: { title: { text: "Queueing delay (s)" }, rangemode: "tozero" },
    }), { displayModeBar: false, responsive: true });
    Plotly.react(document.getElementById("what-if-cluster"), clusterTraces(result), Object.assign({}, LAYOUT, {
      height: 300, grid: { rows: 1, columns: 3, pattern: "independent" },
      yaxis: { range: [0, 100], ticksuffix: " %" }, yaxis2: { rangemode: "tozero" },
      yaxis3: { rangemode: "tozero" },
    }), { displayModeBar: false, responsive: true });
    chart.dataset.drawn = "1";
  }

  function poll() {
    fetch(box.dataset.url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) { return response.json(); })
      .then(function (run) { if (!show(run)) setTimeout(poll, POLL_MS); })
      .catch(function () { setTimeout(poll, POLL_MS * 5); });
  }

  window.addEventListener("load", poll);
})();

// Allocated vs free GPUs per pool, drawn with the plotly.js we serve ourselves.
(function () {
  "use strict";
  const target = document.getElementById("pool-chart");
  if (!target || !window.Plotly) return;
  const rows = JSON.parse(document.getElementById("pool-chart-data").textContent);
  const pools = rows.map(function (r) { return r.pool; });
  function trace(name, key, colour) {
    return {
      type: "bar", orientation: "h", name: name, y: pools, marker: { color: colour },
      x: rows.map(function (r) { return r[key]; }),
      hovertemplate: "%{y}: %{x:.3~f} GPUs " + name.toLowerCase() + "<extra></extra>",
    };
  }
  Plotly.newPlot(target, [
    trace("Allocated", "allocated", "#3d6fd8"),
    trace("Free", "free", "#9fd3b0"),
    trace("Unavailable", "unavailable", "#d0d4db"),
  ], {
    barmode: "stack",
    height: 90 + 44 * pools.length,
    margin: { l: 120, r: 10, t: 30, b: 40 },
    xaxis: { title: { text: "GPUs" }, rangemode: "tozero" },
    yaxis: { automargin: true },
    legend: { orientation: "h", x: 0, y: 1.02, yanchor: "bottom" },
    paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)",
  }, { displayModeBar: false, responsive: true });
})();

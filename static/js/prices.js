// The pricing page: each pool's price per GPU-hour over time as a step line (a price holds until the
// next one starts); spot pools dashed.
(function () {
  "use strict";
  if (!window.Plotly) return;
  const target = document.getElementById("price-chart");
  const rows = JSON.parse(document.getElementById("price-chart-data").textContent);
  const traces = rows.map(function (r) {
    return {
      type: "scatter", mode: "lines", line: { shape: "hv", dash: r.kind === "spot" ? "dash" : "solid" },
      name: r.pool + " (" + r.kind + ")", x: r.x, y: r.y.map(Number), customdata: r.y.map(window.PortalFormat.usd),
      hovertemplate: r.pool + ": %{customdata}/GPU-h from %{x}<extra></extra>",
    };
  });
  Plotly.react(target, traces, {
    height: 360, margin: { l: 60, r: 10, t: 30, b: 40 },
    yaxis: { title: { text: "USD per GPU-hour" }, rangemode: "tozero" },
    legend: { orientation: "h", x: 0, y: 1.02, yanchor: "bottom" },
    paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)",
  }, { displayModeBar: false, responsive: true });
})();

// The budget page: the burn-down chart (cumulative spend per day against the budget and the month's
// forecast), refreshed every 30 s from the budget API so metered spend grows while the page is open.
(function () {
  "use strict";
  var box = document.getElementById("budget-live");
  var chart = document.getElementById("burn-down");
  var dataNode = document.getElementById("burn-down-data");
  if (!box || !chart || !dataNode || !window.Plotly) return;

  function draw(data) {
    var traces = [{ x: data.days, y: data.spend.map(Number), name: "Spent", mode: "lines+markers" }];
    if (data.days.length) {
      var last = data.days[data.days.length - 1];
      var end = data.month_end_day || last;
      traces.push({ x: [last, end], y: [Number(data.spend[data.spend.length - 1]), Number(data.forecast)],
        name: "Forecast", mode: "lines", line: { dash: "dot" } });
      if (data.budget !== null) {
        traces.push({ x: [data.days[0], end], y: [Number(data.budget), Number(data.budget)], name: "Budget",
          mode: "lines", line: { dash: "dash" } });
      }
    }
    window.Plotly.react(chart, traces, { margin: { t: 10, r: 10, b: 40, l: 60 }, yaxis: { title: "USD" } },
      { displayModeBar: false, responsive: true });
  }

  function monthEnd(month) {
    var parts = month.split("-").map(Number);
    var last = new Date(Date.UTC(parts[0], parts[1], 0));
    return last.toISOString().slice(0, 10);
  }

  var initial = JSON.parse(dataNode.textContent);
  initial.month_end_day = monthEnd(initial.month_end);
  draw(initial);

  function refresh() {
    fetch(box.dataset.src, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.json() : Promise.reject(r.status); })
      .then(function (view) {
        box.querySelectorAll("[data-field]").forEach(function (node) {
          var value = view[node.dataset.field];
          if (value !== null && value !== undefined) node.textContent = value;
        });
        draw({ days: view.days.map(function (d) { return d.day; }),
          spend: view.days.map(function (d) { return d.spend_usd; }), budget: view.monthly_usd,
          forecast: view.forecast_usd, month_end_day: monthEnd(view.month) });
      })
      .catch(function () { /* the next refresh tries again */ });
  }
  window.setInterval(refresh, 30000);
})();

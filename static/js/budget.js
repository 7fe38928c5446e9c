// The budget page: the burn-down chart (cumulative spend per day against the budget and the month's
// forecast, on a y-axis from 0 to above the larger of the two, so that the budget line always shows: a
// budget far under the forecast is labelled where it lies, one far above it is not drawn on the chart's
// edge), kept current by the team's live stream: each metering run sends the team's new spend
// (`spend`), drawn in place, and a threshold crossed sends a budget `notice`; either refreshes the
// breakdowns and the alerts. On each (re)connect the figures are fetched once from the budget API.
(function () {
  "use strict";
  var box = document.getElementById("budget-live");
  var chart = document.getElementById("burn-down");
  var dataNode = document.getElementById("burn-down-data");
  var streamsNode = document.getElementById("live-streams");
  if (!box || !chart || !dataNode || !window.Plotly) return;

  var HEADROOM = 1.1;  // the y-axis reaches this far above the larger of budget, forecast and spend

  function draw(data) {
    var traces = [{ x: data.days, y: data.spend.map(Number), name: "Spent", mode: "lines+markers" }];
    var annotations = [];
    var top = Math.max.apply(null, data.spend.map(Number).concat([Number(data.forecast), 0]));
    if (data.days.length) {
      var last = data.days[data.days.length - 1];
      var end = data.month_end_day || last;
      traces.push({ x: [last, end], y: [Number(data.spend[data.spend.length - 1]), Number(data.forecast)],
        name: "Forecast", mode: "lines", line: { dash: "dot" } });
      if (data.budget !== null) {
        var budget = Number(data.budget);
        top = Math.max(top, budget);
        traces.push({ x: [data.days[0], end], y: [budget, budget], name: "Budget", mode: "lines",
          line: { dash: "dash", width: 3, color: "#c0392b" } });
        annotations.push({ x: end, y: budget, xanchor: "right", yanchor: "bottom", showarrow: false,
          text: "Budget " + data.budget + " USD", font: { color: "#c0392b" } });
      }
    }
    window.Plotly.react(chart, traces, {
      margin: { t: 10, r: 10, b: 40, l: 60 }, annotations: annotations,
      yaxis: { title: { text: "USD" }, range: [0, (top || 1) * HEADROOM] },
    }, { displayModeBar: false, responsive: true });
    chart.dataset.updates = String(Number(chart.dataset.updates || 0) + 1);
  }

  function monthEnd(month) {
    var parts = month.split("-").map(Number);
    var last = new Date(Date.UTC(parts[0], parts[1], 0));
    return last.toISOString().slice(0, 10);
  }

  function showFigures(figures) {
    box.querySelectorAll("[data-field]").forEach(function (node) {
      var value = figures[node.dataset.field];
      if (value !== null && value !== undefined) {
        node.textContent = "money" in node.dataset ? window.PortalFormat.usd(value) : value;
      }
    });
  }

  var current = JSON.parse(dataNode.textContent);
  current.month_end_day = monthEnd(current.month_end);
  draw(current);

  function refresh() {
    fetch(box.dataset.src, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.json() : Promise.reject(r.status); })
      .then(function (view) {
        showFigures(view);
        current = { days: view.days.map(function (d) { return d.day; }),
          spend: view.days.map(function (d) { return d.spend_usd; }), budget: view.monthly_usd,
          forecast: view.forecast_usd, month_end_day: monthEnd(view.month) };
        draw(current);
      })
      .catch(function () { /* the next metering run's message brings the figures */ });
  }

  // A metering run's figures: the month's spend so far is today's point of the burn-down.
  function applySpend(spend) {
    showFigures(spend);
    if (spend.month !== current.month_end_day.slice(0, 7)) return refresh();  // a new month began
    var at = current.days.indexOf(spend.day);
    if (at < 0) {
      current.days.push(spend.day);
      current.spend.push(spend.spend_usd);
    } else {
      current.spend[at] = spend.spend_usd;
    }
    current.forecast = spend.forecast_usd;
    current.budget = spend.monthly_usd;
    draw(current);
  }

  if (!streamsNode || !window.PortalLive) return;
  JSON.parse(streamsNode.textContent).forEach(function (stream) {
    window.PortalLive.connect(stream, {
      event: function (frame) {
        if (frame.object === "spend" && frame.team === box.dataset.team) {
          applySpend(frame);
          window.PortalLive.refreshRegions();
        } else if (frame.object === "notice" && frame.kind === "budget") {
          window.PortalLive.refreshRegions();
        }
      },
      // A metering run or a crossing while the socket was not (yet, or any longer) open reached nobody.
      snapshot: function () {
        refresh();
        window.PortalLive.refreshRegions();
      },
    });
  });
})();

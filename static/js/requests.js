// The request list and detail pages, live: a state change refreshes the page's live regions in place;
// a checkpoint counts on the timeline's folded checkpoint line instead (a job may checkpoint every few
// seconds); on the detail page each of the request's allocations draws one utilization line, a point
// a tick, and a dashed line of its card's memory in use.
(function () {
  "use strict";
  const streams = JSON.parse(document.getElementById("live-streams").textContent);
  const chart = document.getElementById("util-chart");
  const requestId = chart ? Number(chart.dataset.request) : null;
  const labels = chart ? JSON.parse(document.getElementById("allocation-labels").textContent) : {};
  const traceOf = {};  // allocation id -> its util trace's index
  const memoryTraceOf = {};  // allocation id -> its memory trace's index
  const MAX_POINTS = 5000;  // per line: a seeded range (up to 1,800 raw points) and over an hour of ticks
  // The request's own time range: from its first slice's start to its end (now while it holds cards).
  const live = chart ? chart.dataset.live === "1" : false;
  let from = chart ? chart.dataset.start || null : null;

  function axisRange(to) {
    // At least a minute wide, so that a request placed a moment ago still has an axis to draw on.
    const start = from || to;
    const wide = Date.parse(to) - Date.parse(start) >= 60000;
    return [wide ? start : new Date(Date.parse(to) - 60000).toISOString(), to];
  }

  if (chart && window.Plotly) {
    // An explicit range: an empty date axis would otherwise read Jan 2000 - Nov 2000.
    const now = new Date().toISOString();
    const range = chart.dataset.end && !live ? [from, chart.dataset.end] : axisRange(now);
    Plotly.newPlot(chart, [], {
      height: 260, margin: { l: 50, r: 10, t: 10, b: 40 },
      yaxis: { title: { text: "util % (memory % dashed)" }, range: [0, 100] },
      xaxis: { type: "date", range: range },
      legend: { orientation: "h" }, paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)",
    }, { displayModeBar: false, responsive: true });
  }

  function extend(traces, id, at, value, style) {
    if (id in traces) {
      Plotly.extendTraces(chart, { x: [[at]], y: [[value]] }, [traces[id]], MAX_POINTS);
    } else {
      traces[id] = chart.data.length;
      Plotly.addTraces(chart, Object.assign({ type: "scatter", x: [at], y: [value] }, style));
    }
  }

  function plot(at, allocations) {
    if (!chart || !window.Plotly) return;
    let drawn = false;
    Object.keys(allocations || {}).forEach(function (id) {
      const entry = allocations[id];
      if (!entry || entry.request !== requestId) return;
      const name = labels[id] || "GPU #" + entry.gpu;
      if (entry.util !== null) extend(traceOf, id, at, entry.util, { mode: "lines+markers", name: name });
      if (entry.mem !== null && entry.mem !== undefined) {
        extend(memoryTraceOf, id, at, entry.mem, { mode: "lines", name: name + " memory", line: { dash: "dash" } });
      }
      drawn = true;
    });
    if (drawn) {
      from = from || at;
      Plotly.relayout(chart, { "xaxis.range": axisRange(at) });
    }
    // Points of the util lines (what the page's tests count).
    chart.dataset.points = String(Object.values(traceOf).reduce(function (n, i) { return n + chart.data[i].x.length; }, 0));
    summarise();
  }

  // What the chart shows, in words, for screen readers: each allocation's latest and mean util.
  function summarise() {
    const parts = Object.values(traceOf).map(function (i) {
      const ys = chart.data[i].y.filter(function (y) { return y !== null; });
      if (!ys.length) return chart.data[i].name + ": no reading yet";
      const mean = ys.reduce(function (a, b) { return a + b; }, 0) / ys.length;
      return chart.data[i].name + ": " + Math.round(ys[ys.length - 1]) + " % now, " + Math.round(mean) + " % on average";
    });
    chart.setAttribute("aria-label", "GPU utilization of each allocation. " + (parts.join("; ") || "No reading yet."));
  }

  // Each slice's readings over the request's own time range (the telemetry API) start its lines; the
  // stream carries on from there while the request holds cards.
  function seed() {
    if (!chart || !window.Plotly) return Promise.resolve();
    return fetch("/api/v1/requests/" + requestId + "/telemetry/", { credentials: "same-origin" })
      .then(function (response) { return response.ok ? response.json() : { cards: [] }; })
      .then(function (body) {
        body.cards.forEach(function (card) {
          const id = String(card.allocation);
          if (!card.points.length || id in traceOf) return;
          const name = labels[id] || card.node + "/gpu" + card.gpu_index;
          const x = card.points.map(function (p) { return p.at; });
          traceOf[id] = chart.data.length;
          Plotly.addTraces(chart, {
            type: "scatter", mode: "lines+markers", name: name, x: x,
            y: card.points.map(function (p) { return p.util_mean; }),
          });
          memoryTraceOf[id] = chart.data.length;
          Plotly.addTraces(chart, {
            type: "scatter", mode: "lines", name: name + " memory", line: { dash: "dash" }, x: x,
            y: card.points.map(function (p) { return Math.round(1000 * p.memory_mean_mib / card.memory_mib) / 10; }),
          });
        });
        chart.dataset.seeded = String(Object.keys(traceOf).length);
        summarise();
      })
      .catch(function () { /* the live points still come */ });
  }

  seed().then(function () { streams.forEach(follow); });

  // The checkpoint continues the timeline's last line when that is a fold of checkpoints: count it
  // there. Otherwise (the first, or the second in a row) the page renders it, folded from the second.
  function countCheckpoint(frame) {
    const timeline = document.getElementById("timeline");
    const last = timeline && timeline.lastElementChild;
    if (!last || !last.classList.contains("checkpoints")) return false;
    const count = Number(last.dataset.count) + 1;
    last.dataset.count = String(count);
    last.querySelector(".count").textContent = count + " times";
    last.querySelector(".last").textContent = (frame.data.at || frame.at).slice(11, 19);
    return true;
  }

  function follow(stream) {
    window.PortalLive.connect(stream, {
      event: function (frame) {
        if (frame.object === "spend") return;  // a metering run's figures, for the budget page
        const checkpoint = frame.object === "gpurequest" && frame.to === "checkpoint";
        if (requestId === null) {
          if (!checkpoint) window.PortalLive.refreshRegions();  // the list shows no checkpoints
        } else if (frame.object === "gpurequest" && frame.id === requestId) {
          if (!checkpoint || !countCheckpoint(frame)) window.PortalLive.refreshRegions();
        }
      },
      // On each (re)connect: a state change made while the socket was not yet (or no longer) open
      // was sent to nobody, so the regions are fetched once to catch up.
      snapshot: function (frame) {
        window.PortalLive.refreshRegions();
        plot(new Date().toISOString(), frame.allocations);
      },
      tick: function (frame) { plot(frame.at, frame.allocations); },
    });
  }
})();

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
  const MAX_POINTS = 600;

  if (chart && window.Plotly) {
    Plotly.newPlot(chart, [], {
      height: 260, margin: { l: 50, r: 10, t: 10, b: 40 },
      yaxis: { title: { text: "util % (memory % dashed)" }, range: [0, 100] }, xaxis: { type: "date" },
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
    Object.keys(allocations || {}).forEach(function (id) {
      const entry = allocations[id];
      if (!entry || entry.request !== requestId) return;
      const name = labels[id] || "GPU #" + entry.gpu;
      if (entry.util !== null) extend(traceOf, id, at, entry.util, { mode: "lines+markers", name: name });
      if (entry.mem !== null && entry.mem !== undefined) {
        extend(memoryTraceOf, id, at, entry.mem, { mode: "lines", name: name + " memory", line: { dash: "dash" } });
      }
    });
    // Points of the util lines (what the page's tests count).
    chart.dataset.points = String(Object.values(traceOf).reduce(function (n, i) { return n + chart.data[i].x.length; }, 0));
  }

  // The allocations' last 15 minutes (the utilization API, by card) start their lines; the stream
  // carries on from there.
  function seed() {
    if (!chart || !window.Plotly) return Promise.resolve();
    const idOf = {};
    Object.keys(labels).forEach(function (id) { idOf[labels[id]] = id; });
    return fetch("/api/v1/requests/" + requestId + "/utilization/", { credentials: "same-origin" })
      .then(function (response) { return response.ok ? response.json() : { gpus: [] }; })
      .then(function (body) {
        body.gpus.forEach(function (card) {
          const id = idOf[card.node + "/gpu" + card.gpu_index];
          if (!id || !card.series.length || id in traceOf) return;
          traceOf[id] = chart.data.length;
          Plotly.addTraces(chart, {
            type: "scatter", mode: "lines+markers", name: labels[id],
            x: card.series.map(function (p) { return p.at; }),
            y: card.series.map(function (p) { return p.gpu_util_percent; }),
          });
        });
        chart.dataset.seeded = String(Object.keys(traceOf).length);
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

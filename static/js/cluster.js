// The cluster page: capacity per pool, a live heatmap of every card's utilization (drawn from one
// compact array), and the nodes' cards and slices loaded on demand, a pool or a search at a time.
(function () {
  "use strict";
  if (!window.Plotly) return;
  const noChrome = { displayModeBar: false, responsive: true };
  const clear = { paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)" };

  function drawPoolChart() {
    const target = document.getElementById("pool-chart");
    const rows = JSON.parse(document.getElementById("pool-chart-data").textContent);
    const pools = rows.map(function (r) { return r.pool; });
    function trace(name, key, colour) {
      return {
        type: "bar", orientation: "h", name: name, y: pools, marker: { color: colour },
        x: rows.map(function (r) { return r[key]; }),
        hovertemplate: "%{y}: %{x:.3~f} GPUs " + name.toLowerCase() + "<extra></extra>",
      };
    }
    Plotly.react(target, [
      trace("Allocated", "allocated", "#3d6fd8"),
      trace("Held outside the portal", "foreign", "#c9a227"),
      trace("Free", "free", "#9fd3b0"),
      trace("Unavailable", "unavailable", "#d0d4db"),
    ], Object.assign({
      barmode: "stack",
      height: 90 + 44 * pools.length,
      margin: { l: 120, r: 10, t: 30, b: 40 },
      xaxis: { title: { text: "GPUs" }, rangemode: "tozero" },
      yaxis: { automargin: true },
      legend: { orientation: "h", x: 0, y: 1.02, yanchor: "bottom" },
    }, clear), noChrome);
  }

  // The heatmap: one row per node, one column per card position; z is util in percent (null: no reading).
  const heatmap = JSON.parse(document.getElementById("heatmap-data").textContent);
  const where = {};  // card id -> [row, column]
  heatmap.gpu_ids.forEach(function (ids, row) {
    ids.forEach(function (id, column) { where[id] = [row, column]; });
  });
  const width = Math.max.apply(null, [1].concat(heatmap.gpu_ids.map(function (ids) { return ids.length; })));
  const z = heatmap.util.map(function (row) {
    return row.concat(new Array(width - row.length).fill(null));
  });
  const heatmapTarget = document.getElementById("heatmap");
  Plotly.newPlot(heatmapTarget, [{
    type: "heatmap", z: z, y: heatmap.nodes, x: z.length ? z[0].map(function (_, i) { return "gpu" + i; }) : [],
    zmin: 0, zmax: 100, colorscale: "Viridis", colorbar: { title: { text: "util %" } }, hoverongaps: false,
    hovertemplate: "%{y} %{x}: %{z} %<extra></extra>",
  }], Object.assign({
    height: Math.min(900, 120 + 14 * heatmap.nodes.length),
    margin: { l: 120, r: 10, t: 10, b: 30 },
    yaxis: { autorange: "reversed", automargin: true, showticklabels: heatmap.nodes.length <= 64 },
  }, clear), noChrome);

  // Plotly's `responsive` follows the window only: a card that changes width without a window resize
  // (the scrollbar that appears as the pools' nodes load, a narrower layout) would leave the plot at its
  // first width, past the card's edge. Each chart follows its own box instead.
  if (window.ResizeObserver) {
    const follow = new ResizeObserver(function (entries) {
      entries.forEach(function (entry) { Plotly.Plots.resize(entry.target); });
    });
    follow.observe(heatmapTarget);
  }

  function applyUtil(gpus) {
    let changed = false;
    Object.keys(gpus).forEach(function (id) {
      const cell = where[id];
      if (!cell) return;  // a card registered after this page loaded: the next page load shows it
      z[cell[0]][cell[1]] = gpus[id];
      changed = true;
    });
    if (changed) Plotly.restyle(heatmapTarget, { z: [z] });
    heatmapTarget.dataset.updates = String(Number(heatmapTarget.dataset.updates || 0) + (changed ? 1 : 0));
  }

  // Node detail: a fragment per pool (when its section opens) or per search; pager links stay inside.
  function load(container, url) {
    container.dataset.current = url;
    return fetch(url, { credentials: "same-origin" })
      .then(function (response) { return response.text(); })
      .then(function (html) { container.innerHTML = html; });
  }
  document.addEventListener("click", function (event) {
    const link = event.target.closest("a[data-fragment]");
    if (!link) return;
    event.preventDefault();
    load(link.closest(".live-nodes"), link.href);
  });
  document.querySelectorAll("details.pool").forEach(function (section) {
    const container = section.querySelector(".live-nodes");
    function openIt() { if (section.open && !container.dataset.current) load(container, container.dataset.src); }
    section.addEventListener("toggle", openIt);
    openIt();
  });
  const search = document.getElementById("node-search");
  search.addEventListener("submit", function (event) {
    event.preventDefault();
    const query = new URLSearchParams(new FormData(search)).toString();
    load(document.getElementById("search-results"), search.action + "?" + query);
  });

  // A state change or a pool's free capacity moving: refresh the summary and every shown node list.
  function refreshPicture() {
    window.PortalLive.refreshRegions(drawPoolChart);
    document.querySelectorAll(".live-nodes").forEach(function (container) {
      if (container.dataset.current) load(container, container.dataset.current);
    });
  }

  // Pools' util moves every second; only a change of free capacity means the picture changed.
  const freeSeen = {};
  function freeChanged(pools) {
    let changed = false;
    Object.keys(pools || {}).forEach(function (name) {
      const free = pools[name] ? pools[name].free_milli : null;
      if (name in freeSeen && freeSeen[name] !== free) changed = true;
      freeSeen[name] = free;
    });
    return changed;
  }

  drawPoolChart();
  JSON.parse(document.getElementById("live-streams").textContent).forEach(function (stream) {
    window.PortalLive.connect(stream, {
      snapshot: function (frame) { applyUtil(frame.gpus); freeChanged(frame.pools); },
      tick: function (frame) {
        if (frame.gpus) applyUtil(frame.gpus);
        if (freeChanged(frame.pools)) refreshPicture();
      },
      event: function (frame) {
        if (frame.object !== "spend") refreshPicture();  // a metering run's figures change no picture
      },
    });
  });
})();

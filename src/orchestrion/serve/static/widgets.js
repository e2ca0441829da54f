// Orchestrion trace viewer: the two vis widgets of an episode. graph(container, g, selectSpan)
// draws the span graph or the plan DAG (vis-network); timeline(kit, container, d, span, selectSpan)
// one bar per span in one lane per kind (vis-timeline). A click on a node or a bar calls
// selectSpan(span id). kit: app.js's helpers (el, cls, secs, tokens, cost).
"use strict";
window.orchestrionWidgets = (function () {
  const COLORS = { ok: ["#d8f0dd", "#2e7d32"], running: ["#fff4c2", "#b58900"], skipped: ["#eeeeee", "#888888"],
    missing: ["#eeeeee", "#888888"], cancelled: ["#eeeeee", "#888888"], invalid: ["#ffe0b2", "#e65100"] };
  const color = (status) => { const c = COLORS[status] || ["#fde0e0", "#c62828"]; return { background: c[0], border: c[1] }; };

  function graph(container, g, selectSpan) {
    const plan = g.mode === "plan";
    const nodes = g.nodes.map((n) => ({ id: n.id, label: n.label, title: n.title, level: plan ? undefined : n.level,
      color: color(n.status), shape: "box", font: { face: "monospace", size: 12, multi: false }, margin: 8 }));
    const edges = g.edges.map((e) => ({ from: e.from, to: e.to, arrows: "to", color: { color: "#777" } }));
    const network = new vis.Network(container, { nodes, edges }, {
      layout: { hierarchical: { direction: plan ? "LR" : "UD", sortMethod: "directed", levelSeparation: plan ? 240 : 90, nodeSpacing: 150 } },
      physics: false, interaction: { hover: true, tooltipDelay: 150 },
      edges: { smooth: { type: "cubicBezier", forceDirection: plan ? "horizontal" : "vertical" } },
    });
    const byId = Object.fromEntries(g.nodes.map((n) => [n.id, n]));
    network.on("click", (p) => { if (p.nodes.length && byId[p.nodes[0]].span_id) selectSpan(byId[p.nodes[0]].span_id); });
    network.once("afterDrawing", () => network.fit());
    container.dataset.nodes = String(g.nodes.length);
    return network;
  }

  // Bars are placed at their exact times (no rounding outwards): a span that starts when another
  // ends only touches it, and vis-timeline stacks only bars that overlap, so the two share a row.
  // `span` (seconds) fixes the visible range, so that two timelines side by side share one scale.
  function timeline(kit, container, d, span, selectSpan) {
    const { el, cls, secs, tokens, cost } = kit;
    const used = d.lanes.filter((lane) => d.spans.some((s) => s.lane === lane));
    const groups = used.map((lane, i) => ({ id: lane, content: lane, order: i }));
    const end = Math.max(0.001, span || 0, ...d.spans.map((s) => s.shown_end));
    const items = d.spans.map((s) => {
      const start = s.start * 1000, stop = Math.max(s.shown_end * 1000, start + 0.001);
      return { id: s.id, group: s.lane, type: "range", content: el("span", null, s.name), start: new Date(start), end: new Date(stop),
        className: "kind-" + cls(s.kind) + " status-" + cls(s.status),
        title: s.kind + " " + s.name + " [" + s.status + "] " + secs(s.start) + " → " + secs(s.shown_end) + ", " + tokens(s) + " tokens, cost " + cost(s.cost_usd) };
    });
    const rel = (date) => "+" + (date.valueOf() / 1000).toFixed(3) + "s";
    // The grid step comes from the visible window, not from the pixel width as vis-timeline would
    // choose it: a redraw while the width is momentarily zero asks it for one line per millisecond.
    const axis = (ms) => { const raw = Math.max(ms / 12, 1), p = 10 ** Math.floor(Math.log10(raw));
      return { scale: "millisecond", step: [1, 2, 5, 10].map((k) => k * p).find((x) => x >= raw) }; };
    const drawn = new vis.Timeline(container, items, groups, {
      stack: true, groupOrder: "order", showCurrentTime: false, orientation: "top", maxHeight: 520,
      // a window bounded around the episode: zooming out without limit (to thousands of years) is what
      // makes vis-timeline warn "Something is wrong with the Timeline scale"
      start: new Date(0), end: new Date(end * 1000 * 1.02), min: new Date(-end * 50), max: new Date(end * 1000 * 1.2),
      zoomMin: 10, zoomMax: end * 1000 * 1.25, margin: { item: { horizontal: -1, vertical: 4 } }, tooltip: { followMouse: true },
      format: { minorLabels: rel, majorLabels: () => "" }, timeAxis: axis(end * 1000 * 1.02),
    });
    drawn.on("rangechange", (w) => drawn.setOptions({ timeAxis: axis(w.end - w.start) }));
    drawn.on("select", (p) => { if (p.items.length) selectSpan(p.items[0]); });
    drawn.on("changed", () => { container.dataset.drawn = "1"; });  // after each redraw, items stacked
    container.dataset.items = String(items.length);
    return drawn;
  }
  return { graph, timeline };
})();

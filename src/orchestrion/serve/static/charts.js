// Orchestrion trace viewer: small line charts in plain SVG (no chart library, works offline).
// draw(metric, data) returns one <svg> for one metric of /api/charts (or the export's charts):
// one line per strategy through its points, each point a circle with its value and episode
// counts in a tooltip; page(kit, filters) renders the whole chart page. Colours follow the
// strategy's place in data.series, so every chart of one page colours a strategy alike.
"use strict";
window.orchestrionCharts = (function () {
  const NS = "http://www.w3.org/2000/svg";
  const PALETTE = ["#1565c0", "#c62828", "#2e7d32", "#6a1b9a", "#ef6c00", "#00838f", "#ad1457", "#5d4037", "#9e9d24", "#455a64"];
  const W = 460, H = 250, L = 64, R = 14, T = 12, B = 46;
  const colorOf = (i) => PALETTE[i % PALETTE.length];
  function svg(tag, attrs, text) {
    const node = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) if (v !== null && v !== undefined) node.setAttribute(k, String(v));
    if (text !== undefined) node.textContent = text;
    return node;
  }
  function format(v, unit) {
    if (v === null || v === undefined) return "unknown";
    if (unit === "share") return (v * 100).toFixed(0) + "%";
    if (unit === "usd") return "$" + (v === 0 ? "0" : v >= 0.01 ? v.toFixed(4) : v.toPrecision(2));
    return v < 1 ? (v * 1000).toFixed(0) + " ms" : v.toFixed(2) + " s";
  }
  function xLabel(x, by, label) {
    if (by === "run") return label.length > 14 ? label.slice(0, 13) + "…" : label;
    const d = new Date(x * 1000);
    return d.toLocaleDateString() === new Date().toLocaleDateString() ? d.toLocaleTimeString() : d.toLocaleDateString();
  }
  function draw(metric, data) {
    const root = svg("svg", { class: "chart", viewBox: "0 0 " + W + " " + H, width: W, height: H, "data-metric": metric.key,
      role: "img", "aria-label": metric.title });
    const series = data.series.map((s, i) => ({ name: s.strategy, color: colorOf(i),
      points: s.points.filter((p) => p[metric.key] !== null && p[metric.key] !== undefined) }));
    const all = series.flatMap((s) => s.points);
    root.setAttribute("data-points", String(all.length));
    if (!all.length) {
      root.append(svg("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "empty" }, "no " + (metric.unit === "share" ? "scored" : "known") + " values"));
      return root;
    }
    const xs = [...new Set(all.map((p) => p.x))].sort((a, b) => a - b);
    const runs = data.by === "run";  // runs: evenly spaced, in time order; time: to scale
    const x0 = xs[0], x1 = xs[xs.length - 1];
    const px = (x) => runs ? L + (xs.length === 1 ? 0.5 : xs.indexOf(x) / (xs.length - 1)) * (W - L - R)
      : L + (x1 === x0 ? 0.5 : (x - x0) / (x1 - x0)) * (W - L - R);
    const top = metric.unit === "share" ? 1 : Math.max(...all.map((p) => p[metric.key])) * 1.1 || 1;
    const py = (v) => T + (1 - v / top) * (H - T - B);
    for (const f of [0, 0.5, 1]) {  // y grid and labels
      root.append(svg("line", { x1: L, x2: W - R, y1: py(top * f), y2: py(top * f), class: "grid" }),
        svg("text", { x: L - 6, y: py(top * f) + 4, "text-anchor": "end", class: "tick" }, format(top * f, metric.unit)));
    }
    const ticks = runs ? xs : x1 === x0 ? [x0] : [x0, x1];
    for (const x of ticks) {
      const p = all.find((q) => q.x === x);
      root.append(svg("text", { x: px(x), y: H - B + 16, "text-anchor": "middle", class: "tick" }, xLabel(x, data.by, p.label)));
    }
    root.append(svg("line", { x1: L, x2: W - R, y1: H - B, y2: H - B, class: "axis" }), svg("line", { x1: L, x2: L, y1: T, y2: H - B, class: "axis" }));
    for (const s of series) {
      if (!s.points.length) continue;
      root.append(svg("polyline", { points: s.points.map((p) => px(p.x) + "," + py(p[metric.key])).join(" "), fill: "none",
        stroke: s.color, "stroke-width": 2, class: "line", "data-strategy": s.name }));
      for (const p of s.points) {
        const dot = svg("circle", { cx: px(p.x), cy: py(p[metric.key]), r: 4.5, fill: s.color, class: "point",
          "data-strategy": s.name, "data-value": p[metric.key], "data-label": p.label });
        dot.append(svg("title", null, s.name + " · " + (p.label || xLabel(p.x, "time", "")) + ": " + format(p[metric.key], metric.unit) +
          " (" + p.n + " episodes, " + p.scored + " scored, " + p.costed + " with a known cost)"));
        root.append(dot);
      }
    }
    return root;
  }
  // The chart page (#/charts?by=time|run&filters), drawn with app.js's helpers (kit).
  async function page(kit, f) {
    const { el, show, source, STATIC, FILTERS, listHash } = kit;
    const by = f.by === "run" ? "run" : "time";
    const filters = Object.fromEntries(Object.entries(f).filter(([k, v]) => v && FILTERS.includes(k)));
    const data = await source.charts({ ...filters, by });
    const go = (b) => { location.hash = "#/charts?" + new URLSearchParams({ ...filters, by: b }); };
    show(
      el("p", null, el("a", { href: listHash(filters) }, "← episodes")),
      el("h1", null, "Per strategy " + (by === "run" ? "across runs" : "over time")),
      el("form", { class: "filters" }, el("label", null, "x axis ",
        el("select", { name: "by", onchange: (e) => go(e.target.value) },
          el("option", { value: "time", selected: by === "time" ? "selected" : null }, "time (equal buckets)"),
          el("option", { value: "run", selected: by === "run" ? "selected" : null }, "runs"))),
      Object.keys(filters).length ? el("span", { class: "hint" }, STATIC ? "a static export charts every episode: the list's filters apply to the served viewer only"
        : "episodes matching: " + Object.entries(filters).map(([k, v]) => k + "=" + v).join(", ")) : null),
      el("p", { class: "hint" }, data.episodes + " episodes. Accuracy counts scored episodes only; cost, episodes whose cost is known. Hover a point for its counts."),
      el("div", { class: "legend" }, data.series.map((s, i) => el("span", { class: "swatch", "data-strategy": s.strategy },
        el("i", { style: "background:" + colorOf(i) }), s.strategy))),
      el("div", { class: "charts" }, data.metrics.map((m) => el("figure", { class: "chart-box" }, el("figcaption", null, m.title), draw(m, data)))));
  }
  return { draw, colorOf, page };
})();

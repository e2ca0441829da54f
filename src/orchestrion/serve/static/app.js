// Orchestrion trace viewer: episode list with filters, and one episode's DAG, timeline,
// spans, decisions and events. Data comes from the JSON API, or from window.ORCHESTRION_DATA
// in a static export. Model text is only ever inserted as text (textContent), never as HTML.
"use strict";
(function () {
  const STATIC = window.ORCHESTRION_DATA || null;
  const FILTERS = ["strategy", "run", "dataset", "correct"];
  const CORRECT = { yes: true, true: true, 1: true, no: false, false: false, 0: false, unknown: null };
  const app = document.getElementById("app");
  const view = (window.orchestrionView = { network: null, timeline: null, episode: null, static: !!STATIC });

  // -- data sources: the same calls over HTTP or over the embedded bundle ---------------
  function httpSource() {
    const get = (url) => fetch(url).then((r) => r.json().then((body) => {
      if (!r.ok) throw new Error(body.detail || r.statusText);
      return body;
    }));
    return {
      facets: () => get("api/facets"),
      episodes: (f) => get("api/episodes?" + new URLSearchParams(f)).then((b) => b.episodes),
      episode: (id) => get("api/episodes/" + encodeURIComponent(id)),
    };
  }
  function staticSource(d) {
    return {
      facets: async () => d.facets,
      episodes: async (f) => d.episodes.filter((e) => matches(e, f)),
      episode: async (id) => {
        const key = id in d.details ? id : Object.keys(d.details).find((k) => k.startsWith(id));
        if (!key) throw new Error("no episode with trace id '" + id + "' in this export");
        return d.details[key];
      },
    };
  }
  function matches(e, f) {  // the same rules as the API (_viewer_data.episode_summaries)
    if (f.strategy && e.strategy !== f.strategy) return false;
    if (f.run && (f.run === "-" ? !!e.run_id : e.run_id !== f.run)) return false;
    if (f.dataset && e.dataset !== f.dataset) return false;
    if (f.correct && f.correct.toLowerCase() in CORRECT && e.correct !== CORRECT[f.correct.toLowerCase()]) return false;
    return true;
  }
  const source = STATIC ? staticSource(STATIC) : httpSource();

  // -- small helpers ----------------------------------------------------------------------
  function el(tag, props, ...kids) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") node.className = v;
      else if (k === "text") node.textContent = v;
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v);
    }
    for (const kid of kids.flat(Infinity)) if (kid !== null && kid !== undefined && kid !== false) node.append(kid instanceof Node ? kid : String(kid));
    return node;
  }
  const cost = (v) => (v === null || v === undefined ? "unknown" : "$" + Number(v).toFixed(6));
  const tokens = (o) => (o.input_tokens || 0) + "+" + (o.output_tokens || 0);
  const secs = (s) => (s === null || s === undefined ? "—" : Math.abs(s) < 1 ? (s * 1000).toFixed(1) + " ms" : s.toFixed(3) + " s");
  const when = (t) => (t ? new Date(t * 1000).toLocaleString() : "—");
  const json = (v) => (typeof v === "string" ? v : JSON.stringify(v, null, 2));
  const correctBadge = (c) => el("span", { class: "badge " + (c === true ? "yes" : c === false ? "no" : "unknown") }, c === true ? "correct" : c === false ? "wrong" : "unknown");
  const statusBadge = (s) => el("span", { class: "badge status-" + cls(s) }, s || "?");
  const cls = (s) => String(s || "none").replace(/[^a-z0-9_-]/gi, "_");
  const show = (...kids) => app.replaceChildren(...kids.flat(Infinity).filter((k) => k !== null && k !== undefined && k !== false));
  function section(title, ...body) { return el("section", null, el("h2", null, title), ...body); }
  function pre(text, klass) { return el("pre", { class: klass || null }, text === null || text === undefined ? "" : json(text)); }
  function messages(list) {
    return (Array.isArray(list) ? list : []).map((m) => el("div", { class: "message" },
      el("div", { class: "role" }, m && m.role ? m.role : "?"), pre(m && "content" in m ? m.content : m)));
  }

  // -- routing ----------------------------------------------------------------------------
  function parseHash() {
    const h = location.hash.replace(/^#\/?/, "");
    if (h.startsWith("episode/")) return { episode: decodeURIComponent(h.slice(8)) };
    const q = new URLSearchParams(h.replace(/^\?/, ""));
    return { filters: Object.fromEntries(FILTERS.map((k) => [k, q.get(k) || ""]).filter(([, v]) => v)) };
  }
  async function route() {
    destroyWidgets();
    const r = parseHash();
    delete document.body.dataset.ready;
    try {
      if (r.episode) await renderEpisode(r.episode);
      else await renderList(r.filters);
      document.body.dataset.ready = r.episode ? "episode" : "list";
    } catch (err) {
      app.replaceChildren(el("p", { class: "error" }, "Could not load: " + err.message));
      document.body.dataset.ready = "error";
    }
  }
  function destroyWidgets() {
    if (view.network) view.network.destroy();
    if (view.timeline) view.timeline.destroy();
    view.network = view.timeline = view.episode = null;
  }

  // -- the list of runs and episodes ------------------------------------------------------
  async function renderList(filters) {
    const [facets, episodes] = await Promise.all([source.facets(), source.episodes(filters)]);
    document.getElementById("source").textContent = (STATIC ? "static export of " + STATIC.episodes.length + (STATIC.episodes.length === 1 ? " episode" : " episodes") + " from " : "") + facets.source;
    const go = (f) => { location.hash = "#/?" + new URLSearchParams(Object.entries(f).filter(([, v]) => v)); };
    const choose = (name, label, options) => el("label", null, label + " ",
      el("select", { name, onchange: (e) => go({ ...filters, [name]: e.target.value }) },
        el("option", { value: "" }, "any"),
        options.map(([value, text]) => el("option", { value, selected: filters[name] === value ? "selected" : null }, text))));
    const bar = el("form", { class: "filters", onsubmit: (e) => e.preventDefault() },
      choose("strategy", "Strategy", facets.strategies.map((s) => [s, s])),
      choose("run", "Run", facets.runs.map((r) => [r.id, r.id === "-" ? "(no run)" : r.id.slice(0, 16)])),
      choose("dataset", "Dataset", facets.datasets.map((d) => [d, d])),
      choose("correct", "Correct", [["yes", "correct"], ["no", "wrong"], ["unknown", "not scored"]]),
      Object.keys(filters).length ? el("a", { href: "#/" }, "clear filters") : null);
    const runs = el("table", { class: "runs" },
      el("tr", null, ["run", "kind", "created", "dataset", "episodes", "correct / scored"].map((h) => el("th", null, h))),
      facets.runs.map((r) => el("tr", { class: "clickable", onclick: () => go({ ...filters, run: r.id }) },
        el("td", { class: "mono" }, r.id === "-" ? "(no run)" : r.id), el("td", null, r.kind || ""), el("td", null, when(r.created)),
        el("td", null, r.dataset || ""), el("td", { class: "num" }, r.episodes), el("td", { class: "num" }, r.correct + " / " + r.scored))));
    const rows = episodes.map((e) => el("tr", { class: "episode-row", "data-id": e.id },
      el("td", null, when(e.started)),
      el("td", { class: "mono" }, el("a", { href: "#/episode/" + encodeURIComponent(e.id) }, e.id.slice(0, 12))),
      el("td", null, e.strategy), el("td", null, statusBadge(e.finished ? e.status : e.status + " (unfinished)")),
      el("td", null, correctBadge(e.correct), e.score === null ? "" : " " + e.score),
      el("td", { class: "num" }, tokens(e)), el("td", { class: "num" }, cost(e.cost_usd)), el("td", { class: "num" }, secs(e.wall_s)),
      el("td", { class: "task" }, e.prompt)));
    show(bar,
      section("Runs", runs),
      section("Episodes (" + episodes.length + ")", episodes.length ? el("table", { class: "episodes" },
        el("tr", null, ["started", "trace id", "strategy", "status", "correct", "tokens", "cost", "wall", "task"].map((h) => el("th", null, h))),
        rows) : el("p", null, "No episode matches these filters.")));
  }

  // -- one episode ------------------------------------------------------------------------
  async function renderEpisode(id) {
    const d = await source.episode(id);
    view.episode = d;
    const s = d.summary;
    const facts = [["strategy", s.strategy], ["status", statusBadge(s.finished ? s.status : s.status + " (unfinished)")],
      ["run", s.run_id || "(no run)"], ["dataset", s.dataset || "—"], ["correct", [correctBadge(s.correct), s.score === null ? "" : " score " + s.score]],
      ["tokens (in+out)", tokens(s)], ["cost", cost(s.cost_usd)], ["cost units", s.cost_units], ["wall", secs(s.wall_s)], ["started", when(s.started)]];
    const graph = el("div", { id: "graph", class: "graph" });
    const timeline = el("div", { id: "timeline" });
    const detail = el("div", { id: "span-detail", class: "span-detail" }, el("p", { class: "hint" }, "Click a graph node, a timeline bar or a span row to see that span here."));
    show(
      el("p", null, el("a", { href: "#/" }, "← all episodes")),
      el("h1", null, "Episode ", el("span", { class: "mono" }, s.id)),
      el("dl", { class: "facts" }, facts.map(([k, v]) => [el("dt", null, k), el("dd", null, v)])),
      el("div", { class: "label" }, "Task"), pre(d.task && d.task.prompt !== undefined ? d.task.prompt : d.task),
      el("div", { class: "label" }, "Answer"), pre(d.answer || "(no answer)", "answer"),
      d.error ? pre(d.error, "error") : null,
      section(d.graph.mode === "plan" ? "Plan DAG" : "Span graph (this episode has no plan: rounds → calls)", graph,
        d.graph.truncated ? el("p", { class: "hint" }, d.graph.truncated + " deeper spans left out of the graph") : null),
      section("Timeline", el("p", { class: "hint" }, "One bar per span from start to end, one lane per kind; bars that overlap ran at the same time."), timeline),
      section("Selected span", detail),
      section("Spans (tokens and cost rolled up over each span's subtree)", spanTable(d)),
      section("Decisions (" + d.decisions.length + ")", d.decisions.length ? d.decisions.map(decision) : el("p", null, "No orchestrator decisions.")),
      section("Sub-agent messages, revisions and other events (" + d.events.length + ")", eventTable(d)));
    view.network = drawGraph(graph, d.graph);
    view.timeline = drawTimeline(timeline, d);
  }

  function selectSpan(spanId) {
    const d = view.episode;
    const s = d && d.spans.find((x) => x.id === spanId);
    const box = document.getElementById("span-detail");
    if (!s || !box) return;
    const attrs = Object.entries(s.attrs || {}).map(([k, v]) => [el("dt", null, k),
      el("dd", null, k === "messages" ? messages(v) : pre(v))]);
    box.replaceChildren(el("h3", null, s.kind + " · " + s.name + " ", statusBadge(s.status)),
      el("p", null, secs(s.start) + " → " + (s.end === null ? "(unfinished)" : secs(s.end)) + " · " + tokens(s) + " tokens · cost " + cost(s.cost_usd) + (s.cost_units ? " · units " + s.cost_units : "")),
      el("dl", { class: "attrs" }, attrs));
    document.querySelectorAll("tr.span-row.selected").forEach((r) => r.classList.remove("selected"));
    const row = document.querySelector('tr.span-row[data-id="' + CSS.escape(spanId) + '"]');
    if (row) row.classList.add("selected");
  }

  function spanTable(d) {
    const kids = {};
    d.spans.forEach((s) => (kids[s.parent_id || ""] = kids[s.parent_id || ""] || []).push(s));
    const known = new Set(d.spans.map((s) => s.id));
    const order = [];
    const walk = (s) => { order.push(s); (kids[s.id] || []).forEach(walk); };
    d.spans.filter((s) => !s.parent_id || !known.has(s.parent_id)).forEach(walk);
    return el("table", { class: "spans" },
      el("tr", null, ["span", "status", "start", "duration", "tokens", "cost", "units"].map((h) => el("th", null, h))),
      order.map((s) => el("tr", { class: "span-row clickable", "data-id": s.id, onclick: () => selectSpan(s.id) },
        el("td", { style: "padding-left:" + (0.4 + s.depth * 1.2) + "em" }, el("span", { class: "kind kind-" + cls(s.kind) }, s.kind), " " + s.name),
        el("td", null, statusBadge(s.status)), el("td", { class: "num" }, secs(s.start)),
        el("td", { class: "num" }, s.end === null ? "unfinished" : secs(s.end - s.start)),
        el("td", { class: "num" }, tokens(s)), el("td", { class: "num" }, cost(s.cost_usd)), el("td", { class: "num" }, s.cost_units || ""))));
  }

  function decision(x) {
    const tokenInfo = ["prompt_token_ids", "token_ids", "logprobs"].filter((k) => x["n_" + k] !== null).map((k) => k + ": " + x["n_" + k]);
    return el("article", { class: "decision " + (x.valid ? "valid" : "invalid"), "data-id": x.id },
      el("h3", null, "#" + x.seq + " · " + (x.span_name || "decision") + " · attempt " + x.attempt + " · " + (x.model || "?") + " · " + (x.schema_name || "") + " ",
        el("span", { class: "badge " + (x.valid ? "yes" : "no") }, x.valid ? "valid" : "invalid")),
      el("details", null, el("summary", null, "Context: " + (x.messages || []).length + " messages"), messages(x.messages)),
      el("div", { class: "label" }, "Raw output"), pre(x.output, "raw-output"),
      x.error ? el("div", { class: "error" }, "Error: " + x.error) : null,
      x.action ? el("details", null, el("summary", null, "Parsed action"), pre(x.action)) : null,
      tokenInfo.length ? el("p", { class: "hint" }, tokenInfo.join(" · ")) : null);
  }

  function eventTable(d) {
    if (!d.events.length) return el("p", null, "No events.");
    return el("table", { class: "events" },
      el("tr", null, ["time", "kind", "span", "data"].map((h) => el("th", null, h))),
      d.events.map((e) => el("tr", { class: "event event-" + cls(e.kind) },
        el("td", { class: "num" }, secs(e.t)), el("td", null, el("span", { class: "kind" }, e.kind)),
        el("td", { class: "clickable", onclick: () => selectSpan(e.span_id) }, e.span_name || ""), el("td", null, pre(e.data)))));
  }

  // -- the graph (vis-network) and the timeline (vis-timeline) ------------------------------
  const COLORS = { ok: ["#d8f0dd", "#2e7d32"], running: ["#fff4c2", "#b58900"], skipped: ["#eeeeee", "#888888"],
    missing: ["#eeeeee", "#888888"], cancelled: ["#eeeeee", "#888888"], invalid: ["#ffe0b2", "#e65100"] };
  const color = (status) => { const c = COLORS[status] || ["#fde0e0", "#c62828"]; return { background: c[0], border: c[1] }; };

  function drawGraph(container, g) {
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

  function drawTimeline(container, d) {
    const used = d.lanes.filter((lane) => d.spans.some((s) => s.lane === lane));
    const groups = used.map((lane, i) => ({ id: lane, content: lane, order: i }));
    const items = d.spans.map((s) => {
      const start = Math.floor(s.start * 1000);
      return { id: s.id, group: s.lane, type: "range", content: el("span", null, s.name), start: new Date(start),
        end: new Date(Math.max(start + 1, Math.ceil(s.shown_end * 1000))),
        className: "kind-" + cls(s.kind) + " status-" + cls(s.status),
        title: s.kind + " " + s.name + " [" + s.status + "] " + secs(s.start) + " → " + secs(s.shown_end) + ", " + tokens(s) + " tokens, cost " + cost(s.cost_usd) };
    });
    const rel = (date) => "+" + (date.valueOf() / 1000).toFixed(3) + "s";
    const timeline = new vis.Timeline(container, items, groups, {
      stack: true, groupOrder: "order", showCurrentTime: false, zoomMin: 2, orientation: "top", maxHeight: 520,
      margin: { item: { horizontal: 0, vertical: 4 } }, tooltip: { followMouse: true },
      format: { minorLabels: rel, majorLabels: () => "" },
    });
    timeline.on("select", (p) => { if (p.items.length) selectSpan(p.items[0]); });
    timeline.on("changed", () => { container.dataset.drawn = "1"; });  // after each redraw, items stacked
    container.dataset.items = String(items.length);
    return timeline;
  }

  window.addEventListener("hashchange", route);
  route();
})();

// Orchestrion trace viewer: episode list with search, filters, sorting and pages; charts per
// strategy over time; one episode's DAG, timeline, spans, decisions, events and annotation; two
// episodes side by side with their decisions diffed (diff.js, charts.js). Data comes from
// the JSON API (kept fresh by the server's event stream, api/stream), or from
// window.ORCHESTRION_DATA in a static export. Model text is only ever inserted as text
// (textContent), never as HTML.
"use strict";
(function () {
  const STATIC = window.ORCHESTRION_DATA || null;
  const FILTERS = ["q", "strategy", "run", "dataset", "correct", "label"];
  const PAGING = ["offset", "limit", "sort", "by"];
  // sortable columns: the API's SORT_KEYS (_viewer_data.py), read the same way for a static export
  const SORTS = { started: (e) => e.started, strategy: (e) => e.strategy, status: (e) => e.status,
    score: (e) => (e.score !== null ? e.score : e.correct === null ? null : Number(e.correct)),
    tokens: (e) => (e.input_tokens || 0) + (e.output_tokens || 0), cost: (e) => e.cost_usd, wall: (e) => e.wall_s,
    label: (e) => e.label };
  const PAGE = 50;
  const CORRECT = { yes: true, true: true, 1: true, no: false, false: false, 0: false, unknown: null };
  const app = document.getElementById("app");
  const view = (window.orchestrionView = { network: null, timeline: null, timelines: [], episode: null, compare: null,
    static: !!STATIC, route: null, changes: 0, refreshes: 0 });

  // -- data sources: the same calls over HTTP or over the embedded bundle ---------------
  function httpSource() {
    const get = (url) => fetch(url).then((r) => r.json().then((body) => {
      if (!r.ok) throw new Error(body.detail || r.statusText);
      return body;
    }));
    return {
      facets: () => get("api/facets"),
      episodes: (f) => get("api/episodes?" + new URLSearchParams(f)),
      episode: (id) => get("api/episodes/" + encodeURIComponent(id)),
      charts: (f) => get("api/charts?" + new URLSearchParams(f)),
      annotate: (id, body) => fetch("api/episodes/" + encodeURIComponent(id) + "/annotation", {
        method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
      }).then((r) => r.json().then((b) => { if (!r.ok) throw new Error(b.detail || r.statusText); return b; })),
    };
  }
  function sortList(list, sort) {  // the API's sort_summaries: stable, episodes without a value last
    const key = (sort || "-started").replace(/^-/, ""), desc = (sort || "-started").startsWith("-");
    if (!(key in SORTS)) throw new Error("sort must be one of " + Object.keys(SORTS).join(", "));
    if (key === "started" && desc) return list;
    const v = SORTS[key], none = (e) => v(e) === null || v(e) === undefined;
    const known = list.filter((e) => !none(e)).sort((a, b) => { const x = v(a), y = v(b), c = x < y ? -1 : x > y ? 1 : 0; return desc ? -c : c; });
    return known.concat(list.filter(none));
  }
  function staticSource(d) {
    return {
      facets: async () => d.facets,
      episodes: async (f) => {
        const found = sortList(d.episodes.filter((e) => matches(e, f, d.details[e.id])), f.sort);
        const offset = Math.max(0, parseInt(f.offset, 10) || 0), limit = Math.max(1, parseInt(f.limit, 10) || PAGE);
        const page = found.slice(offset, offset + limit);
        return { episodes: page, count: page.length, total: found.length, offset, limit };
      },
      episode: async (id) => {
        const key = id in d.details ? id : Object.keys(d.details).find((k) => k.startsWith(id));
        if (!key) throw new Error("no episode with trace id '" + id + "' in this export");
        return d.details[key];
      },
      charts: async (f) => d.charts[f.by || "time"] || d.charts.time,
      annotate: async () => { throw new Error("a static export is read-only"); },
    };
  }
  function matches(e, f, detail) {  // the same rules as the API (_viewer_data.episode_summaries)
    if (f.q) {  // every word of the query in the task prompt, any case
      const task = detail && detail.task, prompt = String(task && task.prompt !== undefined ? task.prompt : e.prompt).toLowerCase();
      if (!f.q.toLowerCase().split(/\s+/).filter(Boolean).every((w) => prompt.includes(w))) return false;
    }
    if (f.strategy && e.strategy !== f.strategy) return false;
    if (f.run && (f.run === "-" ? !!e.run_id : e.run_id !== f.run)) return false;
    if (f.dataset && e.dataset !== f.dataset) return false;
    if (f.correct && f.correct.toLowerCase() in CORRECT && e.correct !== CORRECT[f.correct.toLowerCase()]) return false;
    if (f.label && e.label !== f.label) return false;
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
  const cut = (t, n) => { const one = String(t || "").replace(/\s+/g, " ").trim(); return one.length > n ? one.slice(0, n - 1) + "…" : one; };
  const labelBadge = (e) => (e.label ? el("span", { class: "badge label", title: e.note || null }, e.label) : e.note ? el("span", { class: "hint", title: e.note }, "(note)") : "");
  const show = (...kids) => app.replaceChildren(...kids.flat(Infinity).filter((k) => k !== null && k !== undefined && k !== false));
  function section(title, ...body) { return el("section", null, el("h2", null, title), ...body); }
  function pre(text, klass) { return el("pre", { class: klass || null }, text === null || text === undefined ? "" : json(text)); }
  function messages(list) {
    return (Array.isArray(list) ? list : []).map((m) => el("div", { class: "message" },
      el("div", { class: "role" }, m && m.role ? m.role : "?"), pre(m && "content" in m ? m.content : m)));
  }

  // what charts.js and diff.js draw their views with
  const kit = { el, section, show, source, STATIC, FILTERS, listHash: (f) => listHash(f), cls, secs, tokens, cost };

  // -- routing ----------------------------------------------------------------------------
  function parseHash() {
    const h = location.hash.replace(/^#\/?/, "");
    if (h.startsWith("episode/")) return { episode: decodeURIComponent(h.slice(8)) };
    if (h.startsWith("compare/")) {
      const [a, b] = h.slice(8).split("/").map(decodeURIComponent);
      return { compare: [a, b || ""] };
    }
    if (h.startsWith("charts")) return { charts: Object.fromEntries(new URLSearchParams(h.slice(6).replace(/^\?/, ""))) };
    const q = new URLSearchParams(h.replace(/^\?/, ""));
    return { filters: Object.fromEntries([...FILTERS, ...PAGING].map((k) => [k, q.get(k) || ""]).filter(([, v]) => v)) };
  }
  // One view is drawn at a time: a hash change while one is drawn waits for it, then draws the newest
  // hash, so an older, slower view never lands over a newer one (nor marks the page ready).
  let drawing = null, redraw = false;
  function route() {
    if (drawing) { redraw = true; return drawing; }
    drawing = drawRoute().finally(() => {
      drawing = null;
      if (redraw) { redraw = false; route(); }
    });
    return drawing;
  }
  async function drawRoute() {
    destroyWidgets();
    const r = (view.route = parseHash());
    delete document.body.dataset.ready;
    const ready = r.episode ? "episode" : r.compare ? "compare" : r.charts ? "charts" : "list";
    try {
      if (r.episode) await renderEpisode(r.episode);
      else if (r.compare) await renderCompare(r.compare[0], r.compare[1]);
      else if (r.charts) await window.orchestrionCharts.page(kit, r.charts);
      else await renderList(r.filters);
      if (!redraw) document.body.dataset.ready = ready;
    } catch (err) {
      app.replaceChildren(el("p", { class: "error" }, "Could not load: " + err.message));
      if (!redraw) document.body.dataset.ready = "error";
    }
  }
  function destroyWidgets() {
    if (view.network) view.network.destroy();
    view.timelines.forEach((t) => t.destroy());
    view.network = view.timeline = view.episode = view.compare = null;
    view.timelines = [];
  }

  // -- live refresh: the server pushes "change" events; the page re-reads what is shown ---
  function listen() {
    if (STATIC || typeof EventSource === "undefined") return;
    const stream = new EventSource("api/stream");
    stream.addEventListener("ready", () => { document.body.dataset.live = "open"; setLive("live"); });
    stream.onerror = () => { document.body.dataset.live = "retrying"; setLive("reconnecting…"); };
    stream.addEventListener("change", (msg) => {
      view.changes++;
      const ids = JSON.parse(msg.data).episodes || [];
      const r = view.route || {};
      const shown = r.episode && view.episode ? [view.episode] : r.compare && view.compare ? view.compare : [];
      if (!r.episode && !r.compare && !r.charts) refresh(() => fillList(r.filters || {}));
      else if (shown.some((d) => !d.summary.finished && ids.includes(d.summary.id))) refresh(route, true);
    });
  }
  function setLive(text) { const n = document.getElementById("live"); if (n) n.textContent = text; }
  let busy = null, again = null;
  function refresh(fn, keepScroll) {  // one refresh at a time; changes meanwhile cause one more
    if (busy) { again = [fn, keepScroll]; return; }
    const y = window.scrollY;
    busy = Promise.resolve(fn()).catch(() => {}).then(() => {
      if (keepScroll) window.scrollTo(0, y);
      view.refreshes++;
      busy = null;
      if (again) { const [f, k] = again; again = null; refresh(f, k); }
    });
  }

  // -- the list of runs and episodes: search, filters, pages --------------------------------
  const listHash = (f) => "#/?" + new URLSearchParams(Object.entries(f).filter(([, v]) => v));
  async function renderList(filters) {
    const facets = await source.facets();
    document.getElementById("source").textContent = (STATIC ? "static export of " + STATIC.episodes.length + (STATIC.episodes.length === 1 ? " episode" : " episodes") + " from " : "") + facets.source;
    const go = (f) => { location.hash = listHash({ ...f, offset: "" }); };
    const choose = (name, label, options) => el("label", null, label + " ",
      el("select", { name, onchange: (e) => go({ ...filters, [name]: e.target.value }) },
        el("option", { value: "" }, "any"),
        options.map(([value, text]) => el("option", { value, selected: filters[name] === value ? "selected" : null }, text))));
    const search = el("input", { type: "search", name: "q", value: filters.q || "", placeholder: "words in the task", size: 28 });
    const bar = el("form", { class: "filters", onsubmit: (e) => { e.preventDefault(); go({ ...filters, q: search.value.trim() }); } },
      el("label", null, "Search ", search), el("button", { type: "submit" }, "Search"),
      choose("strategy", "Strategy", facets.strategies.map((s) => [s, s])),
      choose("run", "Run", facets.runs.map((r) => [r.id, r.id === "-" ? "(no run)" : r.id.slice(0, 16)])),
      choose("dataset", "Dataset", facets.datasets.map((d) => [d, d])),
      choose("correct", "Correct", [["yes", "correct"], ["no", "wrong"], ["unknown", "not scored"]]),
      choose("label", "Label", (facets.labels || []).map((l) => [l, l])),
      FILTERS.some((k) => filters[k]) ? el("a", { href: listHash({ sort: filters.sort }) }, "clear filters") : null,
      el("a", { class: "charts-link", href: "#/charts?" + new URLSearchParams(Object.entries(filters).filter(([k, v]) => v && FILTERS.includes(k))) }, "charts per strategy →"));
    show(bar, el("div", { id: "list-body" }));
    await fillList(filters, facets);
  }
  async function fillList(filters, known) {
    const shown = view.route;  // a live refresh that outlasts a change of view must not draw into the new one
    const [facets, page] = await Promise.all([known ? known : source.facets(), source.episodes(filters)]);
    const body = document.getElementById("list-body");
    if (!body || view.route !== shown) return;
    const runs = el("table", { class: "runs" },
      el("tr", null, ["run", "kind", "created", "dataset", "episodes", "correct / scored"].map((h) => el("th", null, h))),
      facets.runs.map((r) => el("tr", { class: "clickable", onclick: () => { location.hash = listHash({ ...filters, run: r.id, offset: "" }); } },
        el("td", { class: "mono" }, r.id === "-" ? "(no run)" : r.id), el("td", null, r.kind || ""), el("td", null, when(r.created)),
        el("td", null, r.dataset || ""), el("td", { class: "num" }, r.episodes), el("td", { class: "num" }, r.correct + " / " + r.scored))));
    const rows = page.episodes.map((e) => el("tr", { class: "episode-row" + (e.finished ? "" : " running"), "data-id": e.id },
      el("td", null, when(e.started)),
      el("td", { class: "mono" }, el("a", { href: "#/episode/" + encodeURIComponent(e.id) }, e.id.slice(0, 12))),
      el("td", null, e.strategy), el("td", null, statusBadge(e.finished ? e.status : e.status + " (unfinished)")),
      el("td", null, correctBadge(e.correct), e.score === null ? "" : " " + e.score),
      el("td", { class: "num" }, tokens(e)), el("td", { class: "num" }, cost(e.cost_usd)), el("td", { class: "num" }, secs(e.wall_s)),
      el("td", { class: "label-cell" }, labelBadge(e)),
      el("td", { class: "task", title: e.prompt }, e.prompt),
      el("td", { class: "answer", title: e.answer || "" }, e.answer === null ? "" : cut(e.answer, 60))));
    body.replaceChildren(section("Runs", runs),
      section("Episodes (" + page.total + ")", pager(filters, page), page.episodes.length ? el("table", { class: "episodes" },
        el("tr", null, COLUMNS.map(([h, key]) => header(h, key, filters))), rows) : el("p", null, "No episode matches " + (filters.q ? "this search and these filters." : "these filters."))));
  }
  const COLUMNS = [["started", "started"], ["trace id"], ["strategy", "strategy"], ["status", "status"], ["correct", "score"],
    ["tokens", "tokens"], ["cost", "cost"], ["wall", "wall"], ["label", "label"], ["task"], ["answer"]];
  function header(text, key, filters) {  // a click sorts by the column, a second reverses it; back to page 1
    if (!key) return el("th", null, text);
    const now = filters.sort || "-started", on = now.replace(/^-/, "") === key, desc = now.startsWith("-");
    const next = on ? (desc ? key : "-" + key) : key;
    return el("th", { class: "sortable" + (on ? " sorted" : ""), "data-sort": key, "aria-sort": on ? (desc ? "descending" : "ascending") : null,
      title: "sort by " + text, onclick: () => { location.hash = listHash({ ...filters, sort: next === "-started" ? "" : next, offset: "" }); } },
    text, on ? (desc ? " ▼" : " ▲") : "");
  }
  function pager(filters, page) {
    if (!page.total) return null;
    const at = (offset) => listHash({ ...filters, offset: offset > 0 ? String(offset) : "" });
    const last = page.offset + page.episodes.length;
    return el("nav", { class: "pager", "data-total": page.total, "data-offset": page.offset },
      page.offset > 0 ? el("a", { href: at(Math.max(0, page.offset - page.limit)), class: "newer" }, "← newer") : null,
      el("span", null, (page.offset + 1) + "–" + last + " of " + page.total),
      last < page.total ? el("a", { href: at(last), class: "older" }, "older →") : null);
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
      annotation(s),
      sameTask(d),
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

  function annotation(s) {  // a label and a note, saved in the trace store (POST api/episodes/ID/annotation)
    if (STATIC) return section("Annotation", s.label || s.note ? el("p", { class: "annotation-shown" }, labelBadge(s), " ", s.note || "")
      : el("p", { class: "hint" }, "Not annotated."), el("p", { class: "hint" }, "A static export is read-only: annotate in the served viewer."));
    const label = el("input", { name: "label", value: s.label || "", maxlength: 64, size: 24, placeholder: "label, e.g. good-plan" });
    const note = el("textarea", { name: "note", rows: 2, cols: 70, maxlength: 4000, placeholder: "a note" }, s.note || "");
    const said = el("span", { class: "hint annotation-status" });
    const save = async (e) => {
      e.preventDefault();
      said.textContent = "saving…";
      try {
        const got = await source.annotate(s.id, { label: label.value, note: note.value });
        s.label = got.label; s.note = got.note;
        said.textContent = got.label || got.note ? "saved" : "cleared";
      } catch (err) { said.textContent = "not saved: " + err.message; }
    };
    return section("Annotation", el("form", { class: "annotation", onsubmit: save },
      el("label", null, "Label ", label), el("label", null, "Note ", note), el("button", { type: "submit" }, "Save"), said),
    el("p", { class: "hint" }, "Kept in the trace store; `orchestrion train export --label NAME` exports only episodes with that label."));
  }

  function sameTask(d) {
    const others = d.same_task || [];
    if (!others.length) return null;
    return section("Same task, other episodes (" + others.length + ")", el("table", { class: "same-task" },
      others.map((o) => el("tr", { "data-id": o.id },
        el("td", { class: "mono" }, el("a", { href: "#/episode/" + encodeURIComponent(o.id) }, o.id.slice(0, 12))),
        el("td", null, o.strategy), el("td", null, statusBadge(o.finished ? o.status : o.status + " (unfinished)")),
        el("td", null, correctBadge(o.correct)), el("td", null, when(o.started)),
        el("td", null, el("a", { class: "compare-link", href: "#/compare/" + encodeURIComponent(d.summary.id) + "/" + encodeURIComponent(o.id) }, "compare side by side"))))));
  }

  // -- two episodes side by side ------------------------------------------------------------
  async function renderCompare(a, b) {
    const both = await Promise.all([source.episode(a), source.episode(b)]);
    view.compare = both;
    const prompt = (d) => (d.task && d.task.prompt !== undefined ? d.task.prompt : JSON.stringify(d.task));
    const span = Math.max(...both.map((d) => Math.max(0.001, ...d.spans.map((s) => s.shown_end))));
    const count = (d, kind) => d.spans.filter((s) => s.kind === kind).length;
    const rows = [["strategy", (s) => s.strategy], ["status", (s) => statusBadge(s.finished ? s.status : s.status + " (unfinished)")],
      ["correct", (s) => [correctBadge(s.correct), s.score === null ? "" : " score " + s.score]],
      ["tokens (in+out)", tokens], ["cost", (s) => cost(s.cost_usd)], ["cost units", (s) => String(s.cost_units)],
      ["wall", (s) => secs(s.wall_s)], ["run", (s) => s.run_id || "(no run)"], ["started", (s) => when(s.started)]];
    const extra = [["decisions (invalid)", (d) => d.decisions.length + " (" + d.decisions.filter((x) => !x.valid).length + ")"],
      ["spans", (d) => String(d.spans.length)], ["tool and agent calls", (d) => String(count(d, "tool") + count(d, "agent"))]];
    const timelines = both.map((d, i) => el("div", { id: "timeline-" + "ab"[i], class: "compare-timeline" }));
    show(
      el("p", null, el("a", { href: "#/" }, "← all episodes")),
      el("h1", null, "Compare two episodes"),
      prompt(both[0]) === prompt(both[1]) ? null : el("p", { class: "error warn-task" }, "These two episodes have different tasks."),
      el("div", { class: "label" }, "Task"), pre(prompt(both[0])),
      el("table", { class: "compare" },
        el("tr", null, el("th", null, ""), both.map((d) => el("th", { class: "mono" },
          el("a", { href: "#/episode/" + encodeURIComponent(d.summary.id) }, d.summary.id)))),
        rows.map(([k, f]) => el("tr", null, el("th", null, k), both.map((d) => el("td", null, f(d.summary))))),
        extra.map(([k, f]) => el("tr", null, el("th", null, k), both.map((d) => el("td", null, f(d))))),
        el("tr", null, el("th", null, "answer"), both.map((d) => el("td", null, pre(d.answer || "(no answer)", "answer"))))),
      window.orchestrionDiff.table(kit, both),
      section("Timelines (one time scale)", el("div", { class: "side-by-side" },
        both.map((d, i) => el("div", null, el("h3", null, d.summary.strategy + " · " + d.summary.id.slice(0, 12)), timelines[i])))));
    view.timelines = both.map((d, i) => drawTimeline(timelines[i], d, span));
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

  // -- the graph and the timeline are drawn by widgets.js (vis-network, vis-timeline) ----------
  function drawGraph(container, g) { return window.orchestrionWidgets.graph(container, g, selectSpan); }
  function drawTimeline(container, d, span) {
    const timeline = window.orchestrionWidgets.timeline(kit, container, d, span, selectSpan);
    view.timelines.push(timeline);
    return timeline;
  }

  window.addEventListener("hashchange", route);
  route();
  listen();
})();

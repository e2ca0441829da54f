// Orchestrion trace viewer: the decision diff of the compare view. Two episodes' decisions are
// aligned by sequence: the n-th decision of one beside the n-th of the other (the attempts of one
// decision share its span; the last valid attempt stands for it). Each pair is compared field by
// field: the tools it calls, what it hands them, the model, whether it ends the episode, and how
// many attempts it took (table(kit, both): the compare view's section). The facets come from the
// server (_viewer_diff.action_facets).
"use strict";
window.orchestrionDiff = (function () {
  const FIELDS = ["tool", "input", "model", "final", "attempts"];
  function slots(d) {
    const bySpan = new Map();
    for (const x of d.decisions || []) {
      const key = x.span_id || "seq:" + x.seq;
      if (!bySpan.has(key)) bySpan.set(key, []);
      bySpan.get(key).push(x);
    }
    return [...bySpan.values()].map((attempts) => {
      const valid = attempts.filter((a) => a.valid);
      return { attempts: attempts.length, x: valid.length ? valid[valid.length - 1] : attempts[attempts.length - 1] };
    });
  }
  function values(slot) {
    if (!slot) return null;
    const x = slot.x, f = x.facets || { tools: [], inputs: [], final: null };
    return { tool: f.tools.join(", ") || "—", input: f.inputs.join(" | ") || "—", model: x.model || "?",
      final: f.final === null || f.final === undefined ? "—" : f.final ? "yes" : "no",
      attempts: String(slot.attempts) + (x.valid ? "" : " (none valid)"), seq: x.seq, action: x.action, output: x.output };
  }
  // One row per aligned pair: {index, a, b, differs: [field names]}; a missing side differs in every field.
  function align(a, b) {
    const A = slots(a), B = slots(b), rows = [];
    for (let i = 0; i < Math.max(A.length, B.length); i++) {
      const va = values(A[i]), vb = values(B[i]);
      rows.push({ index: i + 1, a: va, b: vb, differs: FIELDS.filter((f) => !va || !vb || va[f] !== vb[f]) });
    }
    return rows;
  }
  // The compare view's section: a table of the aligned decisions, differing fields marked (kit: app.js's helpers).
  function table(kit, both) {
    const { el, section } = kit;
    const rows = align(both[0], both[1]);
    if (!rows.length) return section("Decisions", el("p", null, "Neither episode made an orchestrator decision."));
    const differ = rows.filter((r) => r.differs.length).length;
    const cell = (v, r, f) => el("td", { class: r.differs.includes(f) ? "differs" : null, "data-field": f }, v ? v[f] : "(no decision)");
    return section("Decisions, aligned by sequence (" + differ + " of " + rows.length + " differ)",
      el("table", { class: "decision-diff" },
        el("tr", null, el("th", null, "#"), el("th", null, "field"), el("th", { class: "mono" }, both[0].summary.id.slice(0, 12)), el("th", { class: "mono" }, both[1].summary.id.slice(0, 12))),
        rows.map((r) => FIELDS.map((f, i) => el("tr", { class: "diff-row" + (r.differs.length ? " differs" : " same") + (i ? "" : " first"), "data-index": r.index, "data-field": f },
          i ? null : el("th", { rowspan: FIELDS.length }, "#" + r.index, el("br"), r.differs.length ? el("span", { class: "badge no" }, "differs") : el("span", { class: "badge yes" }, "same")),
          el("th", null, f), cell(r.a, r, f), cell(r.b, r, f))))));
  }
  return { FIELDS, align, table };
})();

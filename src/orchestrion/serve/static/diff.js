// Orchestrion trace viewer: the decision diff of the compare view. Two episodes' decisions are
// aligned by sequence: the n-th decision of one beside the n-th of the other (the attempts of one
// decision share its span; the last valid attempt stands for it). Each pair is compared field by
// field: the tools it calls, what it hands them, the model, whether it ends the episode, and how
// many attempts it took. The facets come from the server (_viewer_diff.action_facets).
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
  return { FIELDS, align };
})();

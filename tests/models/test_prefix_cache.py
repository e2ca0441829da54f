"""Static prompt heads pinned in RAM and on disk: what is static, the disk store's checks and
bound, and, on the real SmolLM2, a warm start that changes no output bit."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrion._prompts import Prompt, render, static_chars
from orchestrion.models._kv_cache import KVState, PrefixStateCache, boundary
from orchestrion.models._kv_disk import DiskStateStore
from orchestrion.models._prefix import PrefixReuse, static_offset
from orchestrion.models.types import Completion, GenerateConfig, Message, msg

# --- what is static ---


def test_a_rendered_template_knows_its_static_head() -> None:
    system = render("para_system", max_calls=4, tools="- calculator", models="- m (tier 1)")
    assert isinstance(system, Prompt) and static_chars(system) == len(system)  # pool fields only
    synth = render("synthesize", task="What is 2+2?", results="[R1] 4")
    head = synth[: static_chars(synth)]
    assert head.startswith("A team worked on a task.") and head.endswith("Task: ")
    assert "2+2" not in head and "[R1] 4" not in head
    round_prompt = render("para_round", task="t", history="h", round=1, max_rounds=3)
    assert round_prompt[: static_chars(round_prompt)] == "Task: "  # the task comes at once
    # a prompt changed after rendering is plain text: nothing in it counts as static
    assert static_chars(synth + "\n\nmore") == 0 and static_chars(synth.strip()) == 0


def test_static_offset_runs_through_static_messages_into_the_first_per_task_one() -> None:
    system = render("para_system", max_calls=2, tools="- python", models="- m")
    user = render("direct", task="Name a colour.")
    text = f"<s>{system}</s><u>{user}</u>"
    end_of_head = text.index("Name a colour.")
    assert static_offset([msg("system", system), msg("user", user)], text) == end_of_head
    # a plain system message counts as static; a plain user message does not
    plain = f"<s>rules</s><u>{user}</u>"
    assert static_offset([msg("system", "rules"), msg("user", str(user))], plain) == plain.index("</s>")
    assert static_offset([msg("user", "hello")], "<u>hello</u>") == 0
    assert static_offset([msg("system", "rules"), msg("user", "hello")], "<s>rulez</s><u>hello</u>") == 0


# --- pinned states in RAM ---


def _state(tokens: range | list[int], exact: int | None = None) -> KVState:
    return KVState(tokens=tuple(tokens), data=b"", nbytes=10, exact=exact)


def test_pinned_states_are_never_evicted_by_episode_states() -> None:
    cache = PrefixStateCache(1, margin=8, min_tokens=16, align=64, pin_capacity=2)
    head = _state(range(128))
    cache.pin(head)
    for i in range(5):  # per-episode states come and go
        cache.put(_state([*range(128), *range(1000 * (i + 1), 1000 * (i + 1) + 100)]))
    assert cache.pinned(range(128)) and len(cache) == 1
    hit = cache.best([*range(128), 7, 7, 7], live_prefix=0)
    assert hit is not None and hit[0] is head and hit[1] == 128
    cache.pin(_state(range(500, 600)))
    cache.pin(_state(range(700, 800)))  # over pin_capacity: the least recently used pin goes
    assert not cache.pinned(range(128)) and cache.pinned_count == 2


def test_only_tokens_decoded_in_full_prompt_chunks_are_reused() -> None:
    """A state's output tokens (and a partial last chunk) were decoded in other batches than a
    fresh prompt would be: reuse stops at ``exact``."""
    cache = PrefixStateCache(4, margin=8, min_tokens=16, align=64)
    cache.put(_state(range(300), exact=192))  # prompt of 200 tokens, then 100 generated
    hit = cache.best(list(range(290)) + [5], live_prefix=0)
    assert hit is not None and boundary(hit[1], 64) == 192


# --- the disk store ---


def _store(root: Path, **key: object) -> DiskStateStore:
    return DiskStateStore({"model_sha256": "abc", **key}, root=root, limit=1 << 20)


def test_disk_state_round_trip(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.save([1, 2, 3], b"kv-bytes")
    found = store.load([1, 2, 3])
    assert found is not None and found.data == b"kv-bytes" and found.tokens == (1, 2, 3)
    assert store.load([1, 2, 4]) is None  # another prefix: no file
    assert oct(store.path_for([1, 2, 3]).stat().st_mode & 0o777) == "0o600"


@pytest.mark.parametrize("damage", ["data", "tokens", "truncate", "magic", "foreign"])
def test_a_damaged_or_foreign_state_file_is_rejected_and_deleted(tmp_path: Path, damage: str) -> None:
    store = _store(tmp_path)
    store.save([1, 2, 3], b"kv-bytes")
    path = store.path_for([1, 2, 3])
    blob = bytearray(path.read_bytes())
    if damage == "data":
        blob[-1] ^= 0xFF
    elif damage == "tokens":
        blob[-len(b"kv-bytes") - 4] ^= 0x01
    elif damage == "truncate":
        blob = blob[:-3]
    elif damage == "magic":
        blob[:5] = b"GGUF!"
    else:  # written by another build: same file name, another key inside
        other = _store(tmp_path / "other", llama_cpp="0.0.1")
        other.save([1, 2, 3], b"kv-bytes")
        blob = bytearray(other.path_for([1, 2, 3]).read_bytes())
    path.write_bytes(bytes(blob))
    assert store.load([1, 2, 3]) is None
    assert not path.exists()


def test_the_store_makes_its_root_and_every_missing_parent_owner_only(tmp_path: Path) -> None:
    root = tmp_path / "a" / "b" / "kv"
    store = _store(root)
    store.save([1, 2, 3], b"kv-bytes")
    for folder in (tmp_path / "a", tmp_path / "a" / "b", root, store.folder):
        assert oct(folder.stat().st_mode & 0o777) == "0o700", folder
    assert oct(store.path_for([1, 2, 3]).stat().st_mode & 0o777) == "0o600"


def test_the_default_root_under_the_cache_is_owner_only_and_tightened(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ORCHESTRION_PREFIX_CACHE_DIR")
    monkeypatch.setenv("ORCHESTRION_CACHE", str(tmp_path / "cache"))
    store = DiskStateStore({"model_sha256": "abc"}, limit=1 << 20)
    assert store.root == tmp_path / "cache" / "kv"
    store.save([1], b"x")
    assert oct(store.root.stat().st_mode & 0o777) == "0o700"
    store.root.chmod(0o755)  # as an older version left it
    store.save([2], b"y")
    assert oct(store.root.stat().st_mode & 0o777) == "0o700"


def test_the_disk_store_drops_the_least_recently_used_files_past_its_bound(tmp_path: Path) -> None:
    store = DiskStateStore({"model_sha256": "abc"}, root=tmp_path, limit=2500)
    for i in range(3):
        store.save([i], bytes(1000))
        os.utime(store.path_for([i]), (1000 + i, 1000 + i))
    assert store.load([0]) is None  # the oldest went when the third was written
    assert store.load([1]) is not None  # a load marks it used
    store.save([3], bytes(1000))
    assert store.load([2]) is None and store.load([1]) is not None and store.load([3]) is not None


# --- the real model ---

_GREEDY = GenerateConfig(max_tokens=16, temperature=0.0, logprobs=True)


def _messages(task: str) -> list[Message]:
    system = render("para_system", max_calls=4, tools="- calculator(expression)\n- python(code)",
                    models="- smollm2-135m (tier 1): small")
    return [msg("system", system), msg("user", render("para_round", task=task, history="No calls yet.", round=1,
                                                      max_rounds=3))]


def _same(a: Completion, b: Completion) -> bool:
    return a.text == b.text and a.token_ids == b.token_ids and a.logprobs == b.logprobs


@pytest.mark.integration
def test_a_new_process_starts_from_the_pinned_head_on_disk_and_outputs_do_not_change(tmp_path: Path) -> None:
    """conftest points $ORCHESTRION_PREFIX_CACHE_DIR at tmp_path/kv."""
    from orchestrion.models.llama_cpp import LlamaCppModel

    # each prompt evaluated whole by a model of its own
    baseline = [LlamaCppModel("fresh", state_cache=0, prefix_cache=False)._complete_sync(_messages(t), _GREEDY)
                for t in ("What is 12*13?", "Sort b a c.")]
    assert all(b.extra["prompt_reused"] == 0 for b in baseline)

    first = LlamaCppModel("first", prefix_cache=True)  # evaluates the head once and writes it
    done = first._complete_sync(_messages("What is 12*13?"), _GREEDY)
    assert done.extra["prompt_reused"] == 0 and _same(done, baseline[0])
    files = list((tmp_path / "kv").glob("*/*.kvs"))
    assert len(files) == 1
    head = int(files[0].name.split("-")[0])
    assert head >= 256  # the whole static head, to its last token (a chunk of its own past 64 x n)

    # a new model instance stands for a new process: nothing in RAM, the head comes from disk
    second = LlamaCppModel("second", prefix_cache=True)
    warm = second._complete_sync(_messages("Sort b a c."), _GREEDY)
    assert warm.extra["prompt_reused"] == head
    assert warm.extra["prompt_evaluated"] == len(warm.prompt_token_ids or []) - head
    assert _same(warm, baseline[1])

    # a damaged file is detected, the head evaluated again and written anew
    blob = bytearray(files[0].read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    files[0].write_bytes(bytes(blob))
    third = LlamaCppModel("third", prefix_cache=True)
    again = third._complete_sync(_messages("Sort b a c."), _GREEDY)
    assert again.extra["prompt_reused"] == 0 and _same(again, baseline[1])
    fourth = LlamaCppModel("fourth", prefix_cache=True)
    assert fourth._complete_sync(_messages("What is 12*13?"), _GREEDY).extra["prompt_reused"] == head


def test_the_head_cuts_the_schedule_with_pinning_off_but_nothing_is_pinned() -> None:
    """The schedule is the prompt's alone: a run without the cache decodes the batches a cached one does."""
    reuse = PrefixReuse("m", 4, align=64, pinning=False)
    assert reuse.states.pin_capacity == 0

    class _Llm:
        _is_recurrent = _is_hybrid = False

        def tokenize(self, text: bytes, add_bos: bool, special: bool) -> list[int]:
            return list(range(len(text) // 10))

    system = render("para_system", max_calls=2, tools="- python", models="- m")
    ids = list(range(len(system) // 10 + 40))
    head = reuse.head(_Llm(), [msg("system", system), msg("user", "hi")], system + "hi", ids)
    assert head == len(system) // 10 - 1  # the head's last token is left out: the task may merge into it
    assert not reuse.needs_pin(ids, head)
    assert reuse.head(_Llm(), [msg("system", "short")], "short", ids) == 0  # under one chunk


def test_chunk_ends_shared_by_two_schedules() -> None:
    from orchestrion.models._kv_cache import shared_boundary

    assert boundary(200, 64) == 192 and boundary(200, 64, 150) == 192 and boundary(170, 64, 150) == 150
    assert boundary(140, 64, 150) == 128 and boundary(150, 64, 150) == 150
    assert shared_boundary(170, 64, 150, 150) == 150  # same head: the head is shared
    assert shared_boundary(170, 64, 150, 0) == 128 and shared_boundary(170, 64, 0, 160) == 128
    assert shared_boundary(300, 64, 150, 280) == 128  # they part in the chunk holding 150
    assert shared_boundary(300, 64, 128, 0) == 256  # a head on a multiple of 64 changes nothing


def test_a_pinned_head_is_reused_to_its_last_token_by_a_prompt_with_that_head() -> None:
    cache = PrefixStateCache(4, margin=8, min_tokens=16, align=64, pin_capacity=2)
    pinned = KVState(tokens=tuple(range(150)), data=b"", nbytes=10, exact=150, head=150)
    cache.pin(pinned)
    prompt = [*range(150), 7, 7, 7]
    assert cache.best(prompt, live_prefix=0, head=150) == (pinned, 150)
    # the live context already holds 140 of them, but in another schedule: 128 usable, the pin wins
    assert cache.best(prompt, live_prefix=140, head=150, live_head=0) == (pinned, 150)
    # a live context of the same schedule that holds the head: the pin adds nothing
    assert cache.best(prompt, live_prefix=150, head=150, live_head=150) is None


@pytest.mark.integration
def test_greedy_under_a_grammar_picks_the_tokens_the_sampler_chain_picks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The best-token-first path (models/_greedy.py) against llama-cpp-python's sampler chain:
    the same tokens and log-probs, with the full-vocabulary pass taken where the best token
    was not allowed."""
    from orchestrion.models import _greedy, llama_cpp
    from orchestrion.strategies.para import ParaAction

    full_passes = []
    original = _greedy.GrammarGreedy._pick_allowed

    def counted(self: _greedy.GrammarGreedy, row: object) -> int:
        full_passes.append(1)
        return original(self, row)

    monkeypatch.setattr(_greedy.GrammarGreedy, "_pick_allowed", counted)
    config = GenerateConfig(max_tokens=40, temperature=0.0, logprobs=True, json_schema=ParaAction.model_json_schema())
    runs = {}
    for fast in (True, False):
        monkeypatch.setattr(llama_cpp, "FAST_GRAMMAR_GREEDY", fast)
        model = llama_cpp.LlamaCppModel("m", prefix_cache=False)
        runs[fast] = [model._complete_sync(_messages(t), config) for t in ("What is 12*13?", "Sort b a c.")]
    for a, b in zip(runs[True], runs[False]):
        assert a.structured_mode == "grammar" and a.token_ids and _same(a, b)
    assert full_passes  # the check-first pick did fall back at least once


def test_prefix_cache_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrion._errors import ConfigError
    from orchestrion.models._kv_disk import max_bytes, prefix_cache_enabled

    monkeypatch.setenv("ORCHESTRION_PREFIX_CACHE", "off")
    assert not prefix_cache_enabled()
    monkeypatch.setenv("ORCHESTRION_PREFIX_CACHE", "ON")
    assert prefix_cache_enabled()
    monkeypatch.setenv("ORCHESTRION_PREFIX_CACHE", "maybe")
    with pytest.raises(ConfigError, match="ORCHESTRION_PREFIX_CACHE='maybe'"):
        prefix_cache_enabled()
    monkeypatch.setenv("ORCHESTRION_PREFIX_CACHE_MB", "10")
    assert max_bytes() == 10 << 20
    monkeypatch.setenv("ORCHESTRION_PREFIX_CACHE_MB", "-1")
    with pytest.raises(ConfigError, match="ORCHESTRION_PREFIX_CACHE_MB must be at least 0"):
        max_bytes()


def test_a_bad_disk_bound_is_refused_when_the_model_is_made(monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrion._errors import ConfigError
    from orchestrion.models.llama_cpp import LlamaCppModel

    monkeypatch.setenv("ORCHESTRION_PREFIX_CACHE_MB", "lots")
    with pytest.raises(ConfigError, match="ORCHESTRION_PREFIX_CACHE_MB='lots' is not a whole number"):
        LlamaCppModel("m")
    assert LlamaCppModel("m", prefix_cache=False).prefix.pinning is False  # no disk, nothing to bound

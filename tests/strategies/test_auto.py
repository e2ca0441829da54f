"""``auto``: the arm that did best on similar past @train tasks, cheapest within one standard error."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from typer.testing import CliRunner

from orchestrion import ConfigError, Pool, ScriptedModel, ToolRegistry, TraceStore, solve
from orchestrion.cli import app
from orchestrion.models.types import Usage
from orchestrion.status import EpisodeStatus
from orchestrion.strategies.auto import Outcome, choose_arm
from orchestrion.tools import nearest

ARMS = ["direct:big", "program:big", "para", "direct:small"]
SORT = "Sort the following words alphabetically: List: {}"
COUNT = "I have {} apples and a pear. How many fruits do I have?"


def outcomes(prompt: str, arm: str, scores: list[float], units: float) -> list[Outcome]:
    return [Outcome(prompt.format(i), arm, s, units) for i, s in enumerate(scores)]


def test_no_history_explores_starting_with_direct_on_the_orchestrator() -> None:
    choice = choose_arm(SORT.format("b a"), [], ARMS)
    assert choice.exploring and choice.arm == "direct:big" and "no history at all" in choice.reason


def test_thin_history_explores_the_least_tried_arm() -> None:
    history = outcomes(SORT, "direct:big", [1, 0], 1.0) + outcomes(SORT, "program:big", [1], 2.0)
    choice = choose_arm(SORT.format("z y"), history, ARMS)
    assert choice.exploring and choice.arm == "para"  # never tried; direct:small too, but para comes first
    assert not choose_arm(SORT.format("z y"), history, ARMS, explore=False).exploring


def test_the_cheapest_arm_within_one_standard_error_of_the_best_wins() -> None:
    history = (outcomes(SORT, "direct:big", [0, 0, 1, 0], 1.0) + outcomes(SORT, "program:big", [1, 1, 1, 1], 3.0)
               + outcomes(SORT, "para", [1, 1, 1, 0], 9.0) + outcomes(SORT, "direct:small", [0, 0, 0, 0], 0.1))
    choice = choose_arm(SORT.format("q r"), history, ARMS)
    assert not choice.exploring and choice.arm == "program:big"  # para is within 1 se of it, but costs 3x
    assert choice.stats["program:big"].n == 4 and "no cheaper arm is as good" in choice.reason
    # a cheaper arm that is as good wins
    cheap = [h for h in history if h.arm != "direct:small"] + outcomes(SORT, "direct:small", [1, 1, 1, 1], 0.1)
    assert choose_arm(SORT.format("q r"), cheap, ARMS).arm == "direct:small"


def test_an_arm_that_loses_example_by_example_is_not_as_good() -> None:
    best = [1.0] * 8 + [0.0] * 8
    loses = [1.0] * 6 + [0.0] * 10  # loses two of best's wins: within 1 se of best's mean, but paired it is worse
    trades = [1.0] * 6 + [0.0] * 2 + [1.0] * 2 + [0.0] * 6  # loses two, wins two others: as good
    arms = ["program:big", "direct:small"]
    for cheap, chosen in ((loses, "program:big"), (trades, "direct:small")):
        history = outcomes(SORT, "program:big", best, 3.0) + outcomes(SORT, "direct:small", cheap, 0.1)
        choice = choose_arm(SORT.format("q r"), history, arms, k=16, relative_similarity=0.0, prior_weight=0,
                            safe_z=None)  # the rule alone: under the default guard the first arm runs
        assert choice.stats["direct:small"].mean >= choice.stats["program:big"].mean - choice.stats["program:big"].se
        assert choice.arm == chosen, choice.reason
    assert choice.stats["direct:small"].vs_best == (0.0, pytest.approx((4 / 15 / 16) ** 0.5))


def test_a_weak_arm_lucky_on_a_few_neighbours_is_pulled_to_its_record() -> None:
    history = (outcomes(SORT, "direct:big", [1, 1], 1.0) + outcomes(SORT, "direct:small", [1, 1], 0.1)
               + outcomes(COUNT, "direct:big", [1] * 10, 1.0) + outcomes(COUNT, "direct:small", [0] * 10, 0.1))
    arms = ["direct:big", "direct:small"]
    assert choose_arm(SORT.format("x y"), history, arms, prior_weight=0).arm == "direct:small"  # equal on sorting
    choice = choose_arm(SORT.format("x y"), history, arms, prior_weight=2)
    assert choice.arm == "direct:big" and choice.stats["direct:small"].pulled == pytest.approx((2 + 2 * 2 / 12) / 4)
    assert choose_arm(SORT.format("x y"), history, arms).arm == "direct:big"  # the default pulls harder


def test_the_words_of_one_task_do_not_split_its_kind() -> None:
    """Sorting prompts share only their template; each has words of its own. Counted, those words
    would leave one or two neighbours within the similarity cutoff; shared words only, all are."""
    words = ["mustachio anyhow", "grapefruit mynah", "aberdeen swaziland", "viscosity kelly", "apache harangue",
             "medusa haiti", "observation winkle", "meteoritic typic"]
    history = [Outcome(SORT.format(w), arm, score, units) for w in words
               for arm, score, units in (("program:big", 1.0, 3.0), ("direct:small", 0.0, 0.1))]
    history += outcomes(COUNT, "direct:small", [1] * 8, 0.1) + outcomes(COUNT, "program:big", [0] * 8, 3.0)
    choice = choose_arm(SORT.format("zebra quokka"), history, ["program:big", "direct:small"])
    assert choice.arm == "program:big" and len(choice.neighbours) == 8
    assert all(p.startswith("Sort") for p, _ in choice.neighbours)
    docs = [SORT.format(w) for w in [*words, "zebra quokka"]]
    every_word = nearest(SORT.format("zebra lemur"), docs, 9)
    assert sum(s >= 0.8 * every_word[0][1] for _, s in every_word) == 1  # the one prompt with "zebra" in it
    shared = nearest(SORT.format("zebra lemur"), docs, 9, min_df=2)
    assert len(shared) == 9 and shared[0][1] == pytest.approx(shared[-1][1])  # all alike: the template


def test_neighbours_decide_per_kind_of_task() -> None:
    history = (outcomes(SORT, "program:big", [1, 1, 1], 3.0) + outcomes(SORT, "direct:big", [0, 0, 0], 1.0)
               + outcomes(COUNT, "program:big", [0, 0, 0], 3.0) + outcomes(COUNT, "direct:big", [1, 1, 1], 1.0))
    arms = ["direct:big", "program:big"]
    for k in (3, 20):  # with k=20 every past prompt is among the k nearest: the similarity cutoff separates them
        assert choose_arm(SORT.format("m n"), history, arms, k=k).arm == "program:big"
        assert choose_arm(COUNT.format(9), history, arms, k=k).arm == "direct:big"


# -- the strategy, on a real store and scripted models -----------------------------------------------

def add_episode(store: TraceStore, prompt: str, strategy: str, score: float, *, split: str, model: str | None = None,
                units: float = 1.0) -> None:
    eid = f"{strategy}-{split}-{time.monotonic_ns()}"
    store.start_episode(eid, run_id="r", task_id=eid, epoch=0, strategy=strategy,
                        task={"prompt": prompt, "metadata": {"split": split}}, started=time.time(), meta={})
    store.finish_episode(eid, status=EpisodeStatus.OK, answer="x", error=None, ended=time.time(),
                         usage=Usage(cost_units=units), meta_patch={"score": score, "result": {"model": model}})


def pool() -> Pool:
    big = ScriptedModel(lambda m, c: "Answer: from big", name="big")
    small = ScriptedModel(lambda m, c: "Answer: from small", name="small")
    return Pool.from_models([big, small], orchestrator="big", executor="big")


async def test_auto_learns_from_train_episodes_only_and_records_why(store: TraceStore) -> None:
    for i in range(3):
        add_episode(store, SORT.format(i), "direct", 1.0, split="train", model="small", units=0.1)
        add_episode(store, SORT.format(i), "direct", 0.0, split="train", model="big")
        add_episode(store, SORT.format(i), "direct", 1.0, split="test", model="big")  # must never count
        add_episode(store, SORT.format(i), "direct", 1.0, split="test", model="big")
    store.flush()
    opts = {"arms": ["direct:big", "direct:small"]}
    res = await solve(SORT.format("c d"), strategy="auto", pool=pool(), store=store, options=opts)
    assert res.answer == "Answer: from small" and res.meta["arm"] == "direct:small"
    assert res.meta["auto"]["exploring"] is False and res.meta["auto"]["arms"]["direct:big"]["n"] == 3
    [event] = [e.data_value() for e in store.events(res.trace_id) if e.kind == "auto_choice"]
    assert event["history"] == 6 and len(event["neighbours"]) == 3
    shown = CliRunner().invoke(app, ["trace", "show", res.trace_id, "--db", str(store.path)])
    assert "auto chose direct:small" in shown.output and "best on the 3 nearest past tasks" in shown.output


async def test_auto_with_only_test_history_explores(store: TraceStore) -> None:
    add_episode(store, SORT.format(1), "direct", 1.0, split="test", model="small")
    store.flush()
    res = await solve(SORT.format(2), strategy="auto", pool=pool(), store=store,
                      options={"arms": ["direct:big", "direct:small"]})
    assert res.meta["arm"] == "direct:big" and res.meta["auto"]["exploring"] is True
    assert "no history at all" in res.meta["auto"]["reason"]


async def test_auto_runs_orchestrators_with_their_arm_options(store: TraceStore) -> None:
    decisions: list[int] = []

    def reply(messages: Any, config: Any) -> str:
        if config.json_schema is not None:
            decisions.append(1)
            return "not json"
        return "Answer: 2"

    res = await solve("q", strategy="auto", pool=Pool.from_models([ScriptedModel(reply, name="o")]),
                      tools=ToolRegistry([]), store=store,
                      options={"arms": ["para"], "arm_options": {"para": {"max_rounds": 1}}})
    assert res.meta["arm"] == "para" and res.meta["rounds"] == 1 and res.answer == "Answer: 2"


@pytest.mark.parametrize(("options", "message"), [
    ({"arms": ["nonsense"]}, "arm 'nonsense' names no usable strategy"),
    ({"arms": ["bogus"]}, "arm 'bogus' names no usable strategy"),
    ({"arms": ["para:big"]}, "runs on the whole pool"),
    ({"arms": ["direct:nope"]}, "arm 'direct:nope': strategy 'direct': option 'model' = 'nope' is not a model"),
    ({"arms": ["para"], "arm_options": {"para": {"max_rounds": -1}}}, "option 'max_rounds' = -1"),
    ({"arm_options": {"para": {"max_rounds": -1}}}, "option 'max_rounds' = -1"),  # para is a default arm
    ({"arms": ["para"], "arm_options": {"para": {"nope": 1}}}, "unknown option 'nope'"),
    ({"arms": ["proactive"], "arm_options": {"proactive": {"worker_model": "bogus"}}},
     "option 'worker_model' = 'bogus' is not a model of the pool"),
    ({"arms": ["direct:big"], "arm_options": {"para": {"max_rounds": 2}}}, "arm_options names 'para', which no arm"),
    ({"arms": ["direct:big", "direct:big"]}, "direct:big are listed more than once"),
    ({"arms": []}, "option 'arms' = []"),
])
async def test_bad_arms_are_refused_before_the_episode(store: TraceStore, options: dict[str, Any],
                                                       message: str) -> None:
    models = [ScriptedModel(["Answer: 1"], name="big"), ScriptedModel(["Answer: 2"], name="small")]
    with pytest.raises(ConfigError, match=re.escape(message)) as caught:
        await solve("q", strategy="auto", pool=Pool.from_models(models, orchestrator="big", executor="big"),
                    store=store, options=options)
    assert "\n" not in str(caught.value)
    assert store.episodes() == [] and not any(m.calls for m in models)  # nothing ran, nothing was recorded


@pytest.mark.parametrize("value", ["none", "None", "null", None])
async def test_history_split_none_reads_every_scored_episode(store: TraceStore, value: str | None) -> None:
    # as the option's help says: none (or null) = every scored episode, whatever its split
    for i in range(3):
        add_episode(store, SORT.format(i), "direct", 1.0, split="test", model="small", units=0.1)
        add_episode(store, SORT.format(i), "direct", 0.0, split="test", model="big")
    store.flush()
    res = await solve(SORT.format("c d"), strategy="auto", pool=pool(), store=store,
                      options={"arms": ["direct:big", "direct:small"], "history_split": value})
    assert res.meta["arm"] == "direct:small" and res.meta["auto"]["exploring"] is False
    [event] = [e.data_value() for e in store.events(res.trace_id) if e.kind == "auto_choice"]
    assert event["history"] == 6


async def test_an_unknown_history_split_is_refused(store: TraceStore) -> None:
    with pytest.raises(ConfigError, match="option 'history_split' = 'trian': expected 'train' | 'test' | None"):
        await solve("q", strategy="auto", pool=pool(), store=store, options={"history_split": "trian"})
    assert store.episodes() == []


def test_safe_z_keeps_the_baseline_unless_an_arm_is_clear_of_it() -> None:
    """With ``safe_z`` the first arm is replaced only by an arm that beats it paired by z se, or ties it
    at a lower cost."""
    base = [1.0] * 4 + [0.0] * 12
    noisy = [1.0, 1.0, 0.0, 0.0] + [1.0] * 4 + [0.0] * 8  # loses 2 of base's wins, wins 4 others: +0.12 ± 0.15
    clear = [1.0] * 16
    arms = ["direct:big", "direct:small", "program:big"]

    def pick(small: list[float], program: list[float], z: float | None) -> Any:
        history = (outcomes(SORT, "direct:big", base, 1.0) + outcomes(SORT, "direct:small", small, 0.1)
                   + outcomes(SORT, "program:big", program, 3.0))
        return choose_arm(SORT.format("q r"), history, arms, k=16, relative_similarity=0.0, prior_weight=0, safe_z=z)

    assert pick(noisy, base, None).arm == "direct:small"  # unguarded: the cheapest as good as the best
    guarded = pick(noisy, base, 1.0)
    assert guarded.arm == "direct:big" and "not clear of direct:big by 1 se" in guarded.reason
    assert "direct:small +0.12" in guarded.reason
    assert pick(clear, base, 2.0).arm == "direct:small"  # far above the baseline: the guard lets it run
    assert pick(base, [0.0] * 16, 2.0).arm == "direct:small"  # a tie on every example, and cheaper
    assert pick(noisy, clear, 2.0).arm == "program:big"  # the best, clear of the baseline
    # the pulled best is a noisy cheap arm; the program only ties the baseline, at 3x its compute: the baseline runs
    tied = pick(noisy, base, 1.0)
    assert tied.arm == "direct:big" and "program:big ties it at more compute" in tied.reason

"""Scorers and answer extraction, on hand-checked cases and on real SmolLM2 outputs."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest

from orchestrion._text import extract_answer, extract_number, marked_answer, normalize, parse_number
from orchestrion.eval.scorers import (
    AutoScorer,
    ExactMatch,
    MultipleChoice,
    NumericMatch,
    Score,
    Scorer,
    choose_option,
    pass_at_k,
    scoring_mode,
)
from orchestrion.strategies.base import Task
from tests.helpers import needs_bigbench


def mc_task(scores: dict[str, float], choices: list[str] | None = None) -> Task:
    options = choices or list(scores)
    return Task(prompt="q", choices=options, metadata={"scoring": "multiple_choice", "target_scores": scores})


def text_task(*targets: str, mode: str | None = None) -> Task:
    meta: dict[str, Any] = {"targets": list(targets)}
    if mode:
        meta["scoring"] = mode
    return Task(prompt="q", answer=targets[0], metadata=meta)


def grade(scorer: Scorer, task: Task, output: str) -> Score:
    return asyncio.run(scorer(task, output))


# --- pass@k -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (5, 2, 1, 0.4),  # c/n
        (5, 2, 2, 0.7),  # 1 - C(3,2)/C(5,2) = 1 - 3/10
        (5, 0, 3, 0.0),
        (5, 5, 1, 1.0),
        (5, 3, 3, 1.0),  # fewer failures than k: every draw of 3 holds a pass
        (10, 3, 5, 1 - 21 / 252),  # 1 - C(7,5)/C(10,5)
        (200, 13, 10, 1 - math.comb(187, 10) / math.comb(200, 10)),
    ],
)
def test_pass_at_k_worked_examples(n: int, c: int, k: int, expected: float) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(expected)


@pytest.mark.parametrize(("n", "c", "k"), [(5, 6, 1), (5, 2, 0), (5, 2, 6), (5, -1, 1)])
def test_pass_at_k_rejects_impossible_counts(n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError, match="pass_at_k"):
        pass_at_k(n, c, k)


# --- normalisation and extraction ---------------------------------------------


def test_normalize_case_punctuation_articles_whitespace() -> None:
    assert normalize("  The  Black book, is the leftmost! ") == "black book is leftmost"
    assert normalize("An apple") == normalize("apple.")
    assert normalize("Paris") != normalize("Parish")
    assert normalize("-5") != normalize("5") and normalize("well-known") == "well known"


@pytest.mark.parametrize(
    ("text", "value"),
    [("156", 156), ("156.0", 156), ("-42", -42), ("1,234", 1234), ("$12", 12), ("40%", 40), ("three", 3), (".5", 0.5)],
)
def test_parse_number(text: str, value: float) -> None:
    assert parse_number(text) == value


@pytest.mark.parametrize("text", ["12 apples", "1,2", "abc", "", "3/4"])
def test_parse_number_refuses_non_numbers(text: str) -> None:
    assert parse_number(text) is None


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        ("Let me think.\nThe final answer is 42.", "42"),
        ("Answer: Paris", "Paris"),
        ("**Answer:** blue ball", "blue ball"),
        ("so the result is \\boxed{7}.", "7"),
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("Answer: 3\nactually, the answer is 4", "4"),  # the later marker wins
        ("The final answer is 9.\nAnswer: 8", "9"),  # "final answer" outranks the others
        ("Answer:\n17", "17"),  # the answer alone on the next line
        ("first line\nsecond line\n", "second line"),  # no marker: the last line
    ],
)
def test_extract_answer(output: str, expected: str) -> None:
    assert extract_answer(output) == expected


@pytest.mark.parametrize(
    ("output", "token", "value"),
    [
        ("It is 12 * 13 = 156.", "156", 156),
        ("Answer: 12 * 13 = 156", "156", 156),
        ("Answer: 156 apples, not 150", "156", 156),
        ("I count -7 degrees", "-7", -7),
        ("about 1,250,000 people", "1,250,000", 1250000),
        ("no digits here", None, None),
    ],
)
def test_extract_number(output: str, token: str | None, value: float | None) -> None:
    assert extract_number(output) == (token, value)


# --- scorers ------------------------------------------------------------------


def test_exact_match_any_target_after_normalisation() -> None:
    task = text_task("gelatine stick", "stick gelatine")
    assert grade(ExactMatch(), task, "Sorted!\nAnswer: Gelatine  stick.").correct
    assert grade(ExactMatch(), task, "Answer: stick, gelatine").correct  # the second target
    wrong = grade(ExactMatch(), task, "Answer: gelatine")
    assert (wrong.value, wrong.correct, wrong.extracted) == (0.0, False, "gelatine")
    assert grade(ExactMatch(), task, "   ").extracted is None


@pytest.mark.parametrize(
    ("output", "correct"),
    [
        ("Answer: 156", True),
        ("Answer: 156.0", True),
        ("The product is 1,56", False),
        ("12 times 13 is 156.", True),
        ("Answer: one hundred", False),
        ("Answer: -156", False),
    ],
)
def test_numeric_match(output: str, correct: bool) -> None:
    assert grade(NumericMatch(), text_task("156"), output).correct is correct


def test_numeric_match_accepts_number_words_and_text_targets() -> None:
    task = text_task("seven", "7")
    assert grade(NumericMatch(), task, "I count them. Answer: seven").correct
    assert grade(NumericMatch(), task, "There are 7 objects").correct
    assert grade(NumericMatch(), text_task("1234"), "Answer: 1,234").correct
    assert grade(NumericMatch(), text_task("-3.5"), "Answer: -3.50").correct


def test_multiple_choice_grade_is_the_target_score_of_the_chosen_option() -> None:
    # BIG-bench's multiple_choice_grade: the chosen option's target score (partial credit allowed).
    task = mc_task({"red": 1.0, "pink": 0.5, "blue": 0.0})
    full, half, none = (grade(MultipleChoice(), task, f"Answer: ({x})") for x in "ABC")
    assert (full.value, full.correct, full.extracted) == (1.0, True, "red")
    assert (half.value, half.correct, half.extracted) == (0.5, False, "pink")
    assert (none.value, none.correct) == (0.0, False)


@pytest.mark.parametrize(
    ("output", "chosen"),
    [
        ("Answer: (B)", "05/02/2021"),
        ("Answer: B", "05/02/2021"),
        ("Answer: b) maybe", None),  # a lower-case letter needs parentheses
        ("Answer: (b)", "05/02/2021"),
        ("The answer is 04/29/2021.", "04/29/2021"),  # by text
        ("I think 05/01/2021 is right, so it is 04/29/2021", "04/29/2021"),  # last mention
        ("Answer: (C) 05/02/2021", "04/29/2021"),  # an explicit label outranks the text after it
        ("Answer: (F)", None),  # no such option
        ("No idea.", None),
    ],
)
def test_choose_option(output: str, chosen: str | None) -> None:
    options = ["05/01/2021", "05/02/2021", "04/29/2021"]
    index, _ = choose_option(output, options)
    assert (options[index] if index is not None else None) == chosen


def test_multiple_choice_by_number_value_and_unknown_choice() -> None:
    task = mc_task({"270": 1, "229": 0, "5 %": 0})
    assert grade(MultipleChoice(), task, "Answer: 270.0").correct
    assert grade(MultipleChoice(), task, "Answer: 5%").extracted == "5 %"
    miss = grade(MultipleChoice(), task, "Answer: 300")
    assert (miss.value, miss.extracted, miss.detail) == (0.0, "300", "no option chosen")


def test_scoring_mode_follows_the_reference() -> None:
    assert scoring_mode(mc_task({"a": 1, "b": 0})) == "multiple_choice"
    assert scoring_mode(text_task("12")) == "numeric"
    assert scoring_mode(text_task("Paris")) == "exact"
    assert scoring_mode(Task(prompt="q", metadata={"test": "x", "entry_point": "f"})) == "execution"
    assert scoring_mode(text_task("12", mode="exact")) == "exact"  # the dataset's choice wins


def test_score_to_meta() -> None:
    s = Score(0.5, False, "pink", "chose (B)")
    assert s.to_meta() == {"score": 0.5, "correct": False, "extracted": "pink", "score_detail": "chose (B)"}


def test_auto_scorer_dispatches_per_task() -> None:
    auto = AutoScorer()
    assert isinstance(auto, Scorer)
    assert grade(auto, mc_task({"True": 1, "False": 0}), "Answer: (A)").correct
    assert grade(auto, text_task("156"), "that makes 156").correct
    assert grade(auto, text_task("Paris"), "Answer: paris.").correct


def test_marked_answer_inside_marked_answer() -> None:
    assert marked_answer("Your answer:\nThe answer is 4.\n\nAnswer:") == "4"


# --- real SmolLM2-135M-Instruct outputs ----------------------------------------
# The outputs below are real, unedited answers of the embedded SmolLM2-135M model
# (strategies direct and cot) to BIG-bench prompts built by load_dataset; the
# options and targets are those tasks' own. Expected extractions were checked by hand.

NAVIGATE = {"True": 1.0, "False": 0.0}
LOGIC_236 = {"The tractor is the oldest.": 0.0, "The station wagon is the oldest.": 0.0,
             "The limousine is the oldest.": 1.0}
LOGIC_236_ORDER = ["The tractor is the oldest.", "The limousine is the oldest.", "The station wagon is the oldest."]
DATE_164 = ["04/05/1973", "03/04/2007", "01/02/1973", "03/05/1973", "03/04/1973", "03/05/1983"]
DATE_310 = ["07/30/1924", "03/15/1925", "09/15/1924", "07/07/1924", "09/14/1924", "10/13/1924"]
TRACK_77 = ["black ball.", "blue ball.", "pink ball."]
TEMPORAL_852 = ["6pm to 9pm", "7am to 5pm", "5pm to 6pm", "6am to 7am"]
EMQA_772 = ["77", "33", "15", "88", "11"]
EMQA_7174 = ["210", "130", "90", "60", "150"]


def one_hot(options: list[str], right: str) -> dict[str, float]:
    return {o: float(o == right) for o in options}


REAL_CASES: list[tuple[str, Task, str, str | None, float]] = [
    ("navigate direct", mc_task(NAVIGATE, ["True", "False"]), "The answer is (C)", "(C)", 0.0),
    ("navigate cot", mc_task(NAVIGATE, ["True", "False"]), "(A)", "True", 1.0),
    ("logic direct", mc_task(LOGIC_236, LOGIC_236_ORDER), "(B) The limousine is the oldest.",
     "The limousine is the oldest.", 1.0),
    (
        "date cot",
        mc_task(one_hot(DATE_164, "03/04/1973"), DATE_164),
        "(C) 01/02/1973\nThe answer is: (C) 01/02/1973",
        "01/02/1973",
        0.0,
    ),
    (
        "date direct, echoes the instruction",
        mc_task(one_hot(DATE_164, "03/04/1973"), DATE_164),
        'You choose to answer the question after the last line of the form "Answer: (X) option text"',
        "(X) option text",
        0.0,
    ),
    (
        "date cot, lists options",
        mc_task(one_hot(DATE_310, "09/15/1924"), DATE_310),
        "(C) 03/15/1925\n\n(D) 09/14/1924\n\n(E) 10/13/1924\n\n(F) 10/13/1924",
        "10/13/1924",
        0.0,
    ),
    (
        "tracking direct",
        mc_task(one_hot(TRACK_77, "pink ball."), TRACK_77),
        "I'm sorry for the confusion, I'll just describe the steps:\n\n1. Alice and Bob swap balls.\n"
        "2. Claire and Bob swap balls.\n3. The next round begins.\n\nSo, the final answer is (C) pink ball.",
        "pink ball.",
        1.0,
    ),
    ("tracking cot, label and text disagree", mc_task(one_hot(TRACK_77, "pink ball."), TRACK_77), "(A) blue ball.",
     "black ball.", 0.0),
    (
        "temporal cot",
        mc_task(one_hot(TEMPORAL_852, "5pm to 6pm"), TEMPORAL_852),
        "Ashley woke up at 6am.\nJessica saw Ashley working at the office from 6am to 9am.\n"
        "Nancy saw Ashley stretching at a yoga studio from 6am to 9pm.\n"
        "Samantha saw Ashley stretching at a yoga studio from 6am to 9pm.\n"
        "The art studio was closed after 9pm.\nThe answer is: (C)",
        "5pm to 6pm",
        1.0,
    ),
    (
        "math qa cot",
        mc_task(one_hot(EMQA_772, "15"), EMQA_772),
        "The answer is (B)\n\nIn this math problem, we have to find how many pink highlighters there are in total. "
        "We know that there are 3 pink highlighters, 7 yellow highlighters, and 5 blue highlighters. "
        "Therefore, there are 2 + 7 + 5 = 16 pink highlighters.\n\nSo answer = 16\n\nThe correct answer is (B).",
        "33",
        0.0,
    ),
    ("math qa direct", mc_task(one_hot(EMQA_7174, "60"), EMQA_7174), "The answer to the question is (D) 60.", "60",
     1.0),
    ("math qa cot, bare number", mc_task(one_hot(EMQA_7174, "60"), EMQA_7174), "210\n\nSo the answer is: 210.", "210",
     0.0),
    (
        "arithmetic direct",
        text_task("2024", mode="numeric"),
        "80\n\nThe final answer to the question can be written as 80.",
        "80",
        0.0,
    ),
    ("arithmetic cot", text_task("2024", mode="numeric"), "92 * 22 = 184\nAnswer: N", "184", 0.0),
    (
        "counting direct",
        text_task("eleven", "11", mode="numeric"),
        "I have two stoves, a bed, a table, a microwave, a lamp, three fridges, and a chair. Answer: 2",
        "2",
        0.0,
    ),
    (
        "penguins cot",
        text_task("3", mode="numeric"),
        "This is a fun challenge and I'm ready to assist.\n\nYour answer:\nThe answer is 4.\n\n"
        "There are 4 penguins more than 5 years old.\n\nHow many penguins are more than 5 years old?\n\nAnswer:",
        "4",
        0.0,
    ),
    ("penguins direct", text_task("3", mode="numeric"), 'The answer to the question is "3".', "3", 1.0),
    ("penguins direct, final answer", text_task("29", mode="numeric"), "N: 10\n\nThe final answer is 10.", "10", 0.0),
    ("counting direct, a number word", text_task("five", "5", mode="numeric"), "Three.", "Three.", 0.0),
    ("navigate direct, label wins", mc_task({"True": 0.0, "False": 1.0}, ["True", "False"]), "(A) False", "True", 0.0),
    ("addition direct", text_task("181", mode="numeric"), "The answer to this question is 90.", "90", 0.0),
    (
        "word sorting cot",
        text_task("ballard brindle cornerstone", mode="exact"),
        'The answer to the question is: "Elaborated."',
        "Elaborated",
        0.0,
    ),
]


@pytest.mark.parametrize(("case", "task", "output", "extracted", "value"), REAL_CASES, ids=[c[0] for c in REAL_CASES])
def test_real_smollm2_outputs(case: str, task: Task, output: str, extracted: str | None, value: float) -> None:
    score = grade(AutoScorer(), task, output)
    assert (score.extracted, score.value) == (extracted, value), score.detail


# --- the real embedded model -----------------------------------------------------


@pytest.mark.integration
@needs_bigbench
async def test_real_model_outputs_are_scored(store: Any) -> None:
    """SmolLM2 answers three BIG-bench tasks; whatever it says, the scorer reads from its words."""
    from orchestrion import Pool, solve
    from orchestrion.eval.datasets import load_dataset

    pool = Pool.default()
    specs = ["bigbench:navigate", "bigbench:arithmetic/2_digit_addition", "bigbench:object_counting"]
    for spec in specs:
        ds = load_dataset(spec, limit=1, seed=5)
        task = ds.tasks[0]
        result = await solve(task, strategy="direct", pool=pool, store=store)
        output = result.answer or ""
        assert output.strip(), f"{spec}: the model gave no output ({result.status})"
        score = await ds.scorer(task, output)
        assert 0.0 <= score.value <= 1.0 and score.correct == (score.value == 1.0)
        if score.extracted is None:
            continue
        if task.metadata["scoring"] == "multiple_choice" and score.extracted in (task.choices or []):
            label = task.metadata["labels"][(task.choices or []).index(score.extracted)]
            assert label in output or normalize(score.extracted) in normalize(output), (output, score)
        else:
            assert score.extracted in output, (output, score)

from __future__ import annotations

from orchestrion._text import normalize
from orchestrion.tools.agents import majority


def test_votes_normalise_case_punctuation_articles_and_final_full_stop() -> None:
    assert normalize("  The answer: 15. ") == normalize("the answer 15") == "answer 15"
    assert normalize("3.5") != normalize("35") and normalize("-5") != normalize("5")
    assert normalize("A") == normalize("(a)") == "a" != normalize("") != normalize("B")  # option letters stay apart


def test_majority_and_ties() -> None:
    assert majority(["15", "16", "15."]) == ("15", 2)
    assert majority(["a", "b"]) == ("a", 1)
    assert majority([]) == ("", 0)

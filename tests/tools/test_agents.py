from __future__ import annotations

from orchestrion.tools.agents import majority, normalise


def test_normalise_ignores_case_punctuation_and_final_full_stop() -> None:
    assert normalise("  The answer: 15. ") == normalise("the answer 15") == "the answer 15"
    assert normalise("3.5") == "3.5"


def test_majority_and_ties() -> None:
    assert majority(["15", "16", "15."]) == ("15", 2)
    assert majority(["a", "b"]) == ("a", 1)
    assert majority([]) == ("", 0)

"""Prompt pieces shared by the dataset loaders."""

from __future__ import annotations

from ..scorers import option_labels

MC_HINT = (
    'Pick the one correct option. End with a last line of the form "Answer: (X) option text", where X is its letter.'
)
NUMERIC_HINT = 'End with a last line of the form "Answer: N", where N is only the number.'
EXACT_HINT = 'End with a last line of the form "Answer: ..." that gives only the answer.'
HINTS = {"multiple_choice": MC_HINT, "numeric": NUMERIC_HINT, "exact": EXACT_HINT}


def options_block(choices: list[str]) -> str:
    """The options as "(A) text" lines under a heading."""
    labels = option_labels(len(choices))
    return "Options:\n" + "\n".join(f"({label}) {c.strip()}" for label, c in zip(labels, choices))

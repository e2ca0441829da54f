"""The answer channel: what the caller of an episode (``orchestrion serve``) wants of its final
answer, streaming and format. Passed to the episode explicitly and held by its run context
(``ctx.answer``); the synthesis (:mod:`.synthesis`) streams into it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any


class AnswerChannel:
    """What the caller of an episode wants of its final answer.

    ``on_text`` receives the answer's text piece by piece while the synthesis model writes it
    (called from the model's thread: it must be thread-safe). ``json_schema`` asks for an
    answer that is one JSON value matching it (``{"type": "object"}`` for any object).
    ``sent`` is what was handed to ``on_text``; ``finish_reason`` is the answer call's
    (``length`` when it stopped at its token limit).
    """

    def __init__(self, on_text: Callable[[str], None] | None = None,
                 json_schema: dict[str, Any] | None = None) -> None:
        self.on_text = on_text
        self.json_schema = json_schema
        self.claimed = False
        self.sent = ""
        self.finish_reason: str | None = None

    def claim(self) -> bool:
        """The first synthesis of the episode streams; any later one does not."""
        first, self.claimed = not self.claimed, True
        return first

    def emit(self, piece: str) -> None:
        if piece:
            self.sent += piece
            if self.on_text is not None:
                self.on_text(piece)

    def finish(self, answer: str, finish_reason: str) -> bool:
        """Send what ``answer`` adds to what was streamed; False if the stream went astray."""
        self.finish_reason = finish_reason
        if not answer.startswith(self.sent):
            return False
        for piece in text_pieces(answer[len(self.sent):]):
            self.emit(piece)
        return True



def text_pieces(text: str) -> list[str]:
    """``text`` cut into word-sized pieces (each with the whitespace before it), for callers
    that stream an answer no model streamed."""
    return re.findall(r"\s*\S+\s*$|\s*\S+", text) or ([text] if text else [])

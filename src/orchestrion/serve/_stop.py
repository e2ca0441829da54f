"""The request's ``stop`` strings, applied to the answer the way vLLM applies them.

The answer ends just before the first stop string in it (the one that starts earliest; the
stop string itself is not sent) and the response's ``finish_reason`` is ``stop``, its
``stop_reason`` the string matched. While streaming, no text past a stop string ever goes out:
:class:`StopCut` holds back a tail of what it was fed while that tail could still be the start
of a stop string, and releases it once more text rules that out (or at the end).

The cut applies to what the client receives; the episode's record keeps the answer whole.
"""

from __future__ import annotations

from collections.abc import Sequence


class StopCut:
    """Feeds an answer's text through piece by piece; each call says what may go out now."""

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = tuple(s for s in stops if s)
        self.text = ""  # everything fed
        self.released = ""  # what was let out: always a prefix of the cut answer
        self.matched: str | None = None  # the stop string found, once found
        self._longest = max((len(s) for s in self.stops), default=0)

    def feed(self, piece: str) -> str:
        """The part of the text so far that may go out now and has not yet."""
        if self.matched is not None or not piece:
            return ""
        start = max(0, len(self.text) - self._longest + 1)  # a stop string not seen before ends in the new text
        self.text += piece
        found = _first(self.text, self.stops, start)
        if found is not None:
            end, self.matched = found
        else:
            end = len(self.text) - _open_tail(self.text, self.stops)
        return self._release(end)

    def flush(self) -> str:
        """The held-back tail, once the text is complete (nothing after a stop string)."""
        return "" if self.matched is not None else self._release(len(self.text))

    def _release(self, end: int) -> str:
        out = self.text[len(self.released):end]
        self.released += out
        return out


def cut(text: str, stops: Sequence[str]) -> tuple[str, str | None]:
    """``text`` up to its first stop string, and that string (None when there is none)."""
    found = _first(text, tuple(s for s in stops if s), 0)
    return (text, None) if found is None else (text[:found[0]], found[1])


def _first(text: str, stops: tuple[str, ...], start: int) -> tuple[int, str] | None:
    """Where the earliest stop string at or after ``start`` begins, and which (list order on a tie)."""
    best: tuple[int, str] | None = None
    for stop in stops:
        at = text.find(stop, start)
        if at >= 0 and (best is None or at < best[0]):
            best = (at, stop)
    return best


def _open_tail(text: str, stops: tuple[str, ...]) -> int:
    """The length of the longest end of ``text`` that a stop string starts with (but is not)."""
    for size in range(min(len(text), max((len(s) for s in stops), default=1) - 1), 0, -1):
        tail = text[-size:]
        if any(s.startswith(tail) for s in stops):
            return size
    return 0

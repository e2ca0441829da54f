"""Pulling a final answer out of free model text, and normalising it for comparison."""

from __future__ import annotations

import re
import string

# Final-answer markers. "final answer" outranks the rest; among the rest the last one in the text wins.
# The answer may sit on the marker's line or alone on the next line.
_GAP = r"[ \t]*(?:\n[ \t]*)?"
_FINAL = re.compile(r"final\s+answer[ \t]*(?:is|was|would\s+be|=)?[ \t]*[:：]?" + _GAP + r"(.+)", re.IGNORECASE)
_OTHERS = [
    re.compile(r"\banswer[ \t*_]*[:：]" + _GAP + r"(.+)", re.IGNORECASE),
    re.compile(
        r"\banswer(?:\s+to\s+(?:the|this)\s+(?:question|problem))?\s+(?:is|would\s+be|=)[ \t]*[:：]?" + _GAP + r"(.+)",
        re.IGNORECASE,
    ),
]
_NUMBER = re.compile(r"(?<![\w.])[-+−]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?![\d])|(?<![\w.])[-+]?\.\d+")
_MINUS = re.compile(r"(?<![\w.])-(?=\d)")  # a sign is kept: "-5" and "5" differ
_ARTICLES = re.compile(r"\b(?:a|an|the)\b")
_PUNCT = str.maketrans({c: " " for c in string.punctuation + "“”‘’«»…–—"})
_WORDS = {
    w: i
    for i, w in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
        "sixteen seventeen eighteen nineteen twenty".split()
    )
}
_NUMBER_WORD = re.compile(r"\b(?:" + "|".join(_WORDS) + r")\b", re.IGNORECASE)


def boxed(text: str) -> str | None:
    """The contents of the last ``\\boxed{...}``, braces balanced."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, i = 0, start + len("\\boxed")
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i + 1 : j].strip()
    return None


def _clean(raw: str) -> str:
    line = raw.strip().splitlines()[0] if raw.strip() else ""
    while True:
        before = line
        line = re.sub(r"^[\s*_`\"'“”]+|[\s*_`\"'“”]+$", "", line)
        line = re.sub(r"^\$+|\$+$", "", line)  # $x$ math delimiters
        line = line.rstrip(".").strip()
        if line == before:
            return line


def marked_answer(text: str, _depth: int = 0) -> str | None:
    """The answer a final-answer marker points at ("The final answer is X", "Answer: X", boxed)."""
    if (inside := boxed(text)) is not None:
        return inside
    found = [m for m in _FINAL.finditer(text) if _clean(m[1])]
    if not found:
        found = sorted((m for p in _OTHERS for m in p.finditer(text) if _clean(m[1])), key=lambda m: m.start(1))
    if not found:
        return None
    answer = _clean(found[-1][1])
    inner = marked_answer(answer, _depth + 1) if _depth < 2 else None  # "Answer: The answer is 4"
    return inner or answer


def last_line(text: str) -> str | None:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return _clean(lines[-1]) if lines else None


def extract_answer(text: str) -> str | None:
    """A marked final answer, else the last non-empty line."""
    return marked_answer(text) or last_line(text)


def parse_number(text: str) -> float | None:
    """``text`` as a number if it is one: "1,234", "-5", "156.0", "$12", "40%", "three"."""
    t = text.strip().lower().replace("−", "-").strip("$ ")
    t = re.sub(r"\s*%$", "", t.rstrip("."))
    if t in _WORDS:
        return float(_WORDS[t])
    if re.fullmatch(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|[-+]?\.\d+", t):
        return float(t.replace(",", ""))
    return None


def numbers_in(text: str) -> list[float]:
    """Every number written in ``text``, in order (thousands commas allowed)."""
    return [float(m[0].replace(",", "").replace("−", "-")) for m in _NUMBER.finditer(text)]


def _number_token(source: str, *, last: bool) -> tuple[str, float] | None:
    whole = parse_number(source)
    if whole is not None:
        return source, whole
    found = [m[0] for m in _NUMBER.finditer(source)]
    if found:
        token = found[-1] if last else found[0]
        return token, float(token.replace(",", "").replace("−", "-"))
    words = [m[0] for m in _NUMBER_WORD.finditer(source)]
    if words:
        word = words[-1] if last else words[0]
        return word, float(_WORDS[word.lower()])
    return None


def extract_number(text: str) -> tuple[str | None, float | None]:
    """The final number: from a marked answer when there is one, else the last number in the text.

    In a marked answer the first number counts ("Answer: 156 apples"), or the one
    after the last "=" ("Answer: 12 * 13 = 156").
    """
    marked = marked_answer(text)
    if marked:
        found = _number_token(marked.rsplit("=", 1)[-1].strip(), last=False)
        if found is not None:
            return found
    found = _number_token(text, last=True)
    return found if found is not None else (None, None)


def normalize(text: str) -> str:
    """Lower case, no punctuation (a minus sign is kept as a word), no articles, single spaces."""
    t = _MINUS.sub("minus ", text.lower().replace("−", "-")).translate(_PUNCT)
    t = _ARTICLES.sub(" ", t)
    return " ".join(t.split())


def contains_phrase(haystack: str, needle: str) -> list[int]:
    """Start offsets where normalised ``needle`` occurs in normalised ``haystack`` on word boundaries."""
    if not needle:
        return []
    return [m.start() for m in re.finditer(r"(?<!\S)" + re.escape(needle) + r"(?!\S)", haystack)]


_FENCE = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)


def code_blocks(text: str) -> list[tuple[str, str]]:
    """Fenced code blocks as (language, code); an unclosed last fence runs to the end."""
    return [(m[1].lower(), m[2]) for m in _FENCE.finditer(text)]

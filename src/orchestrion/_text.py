"""Small text helpers that strategies, tools, scorers and loaders share; one definition each.

- answers: pull a final answer out of free model text (:func:`extract_answer`), read
  numbers, and :func:`normalize` answers for comparison (scorers and votes alike);
- lenient JSON: the JSON value in a model's output (:func:`extract_json`) and where it
  sits in the text (:func:`locate_json`);
- files: JSONL and YAML readers whose errors are a :class:`ConfigError` naming ``file:line``.

A leaf module: it imports nothing of orchestrion but ``_errors``.
"""

from __future__ import annotations

import gzip
import json
import re
import string
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ._errors import ConfigError

# --- answers -----------------------------------------------------------------------

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


# A closing instruction on how to write a text answer ('End with a last line of the form "Answer: N"
# ...'): what the dataset loaders append, and the common phrasings of it.
_ANSWER_LINE_HINT = re.compile(
    r"\n+[ \t]*(?:Pick the one correct option\.\s*)?(?:End|Finish|Conclude)\s+with\s+a\s+(?:last|final)\s+line\b"
    r"[^\n]*\bAnswer:[^\n]*\s*$", re.IGNORECASE)


def without_answer_line_hint(task: str) -> str:
    """``task`` without a closing instruction on the form of a text answer's last line. A program
    prints its answer instead; shown that line, small coders write it out as a comment
    (``# Answer: 14``) and compute nothing."""
    return _ANSWER_LINE_HINT.sub("", task).rstrip()


def only_comments(code: str) -> bool:
    """True when ``code`` has no statement: blank lines and ``#`` comments only."""
    return all(not line.strip() or line.lstrip().startswith("#") for line in code.splitlines())


def last_line(text: str) -> str | None:
    """The last non-empty line, without markdown emphasis, quotes, ``$`` or a closing full stop."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return _clean(lines[-1]) if lines else None


def extract_answer(text: str) -> str | None:
    """A marked final answer, else the last non-empty line; None for blank text."""
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
    """Lower case, no punctuation (a minus sign is kept as a word), no articles, single spaces.

    Articles stay when they are all there is, so an option letter "A" is not the empty answer.
    """
    t = _MINUS.sub("minus ", text.lower().replace("−", "-")).translate(_PUNCT)
    return " ".join(_ARTICLES.sub(" ", t).split()) or " ".join(t.split())


def contains_phrase(haystack: str, needle: str) -> list[int]:
    """Start offsets where normalised ``needle`` occurs in normalised ``haystack`` on word boundaries."""
    if not needle:
        return []
    return [m.start() for m in re.finditer(r"(?<!\S)" + re.escape(needle) + r"(?!\S)", haystack)]


_FENCE = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
PYTHON_FENCES = ("", "python", "py", "python3")


def code_blocks(text: str) -> list[tuple[str, str]]:
    """Fenced code blocks as (language, code); an unclosed last fence runs to the end."""
    return [(m[1].lower(), m[2]) for m in _FENCE.finditer(text)]


# --- lenient JSON ------------------------------------------------------------------

_JSON_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)
_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_LITERALS = {"true": True, "false": False, "null": None}


def _json_candidates(text: str) -> list[tuple[int, str]]:
    """Where a JSON value may be read, in order, with the text read there: the whole
    text, each code fence, and the first balanced ``{...}``."""
    found = [(len(text) - len(text.lstrip()), text.strip())]
    found += [(m.start(1), m[1].strip()) for m in _JSON_FENCE.finditer(text)]
    start = text.find("{")
    if start >= 0:
        found.append((start, _balanced(text, start)))
    return found


def extract_json(text: str) -> Any:
    """The first JSON value in ``text``: bare, inside a code fence, or the outermost {...}."""
    last: Exception | None = None
    for _, cand in _json_candidates(text):
        if not cand:
            continue
        try:
            return orjson.loads(cand)
        except orjson.JSONDecodeError as exc:
            last = exc
        try:  # small models put raw newlines inside strings; accept them
            return json.loads(cand, strict=False)
        except json.JSONDecodeError:
            pass
    raise ValueError(f"no JSON object found ({last})" if last else "empty output")


def _balanced(text: str, start: int) -> str:
    depth, in_str, esc = 0, False, False
    for i in range(start, len(text)):
        ch = text[i]
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[start : i + 1]
    return text[start:]


@dataclass
class JsonNode:
    """A JSON value and the characters [start, end) it occupies in the text it was read from."""

    start: int
    end: int
    value: Any
    items: list[JsonNode] = field(default_factory=list)  # array elements
    keys: dict[str, JsonNode] = field(default_factory=dict)  # object members

    def get(self, key: str) -> JsonNode | None:
        return self.keys.get(key)


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    return i


def _scan(text: str, i: int) -> JsonNode:
    """Read one JSON value at ``i`` (after whitespace), keeping positions; raw newlines in strings allowed."""
    i = _skip(text, i)
    ch = text[i]
    if ch in "{[":
        close, node = ("}" if ch == "{" else "]"), JsonNode(i, i, None)
        j = _skip(text, i + 1)
        while text[j] != close:
            if ch == "{":
                key = _scan(text, j)
                j = _skip(text, key.end)
                if not isinstance(key.value, str) or text[j] != ":":
                    raise ValueError(f"expected a key and ':' at {j}")
                node.keys[key.value] = child = _scan(text, j + 1)
            else:
                node.items.append(child := _scan(text, j))
            j = _skip(text, child.end)
            if text[j] == ",":
                j = _skip(text, j + 1)
            elif text[j] != close:
                raise ValueError(f"expected ',' or '{close}' at {j}")
        node.end = j + 1
        node.value = {k: v.value for k, v in node.keys.items()} if ch == "{" else [v.value for v in node.items]
        return node
    if ch == '"':
        j = i + 1
        while text[j] != '"':
            j += 2 if text[j] == "\\" else 1
        return JsonNode(i, j + 1, json.loads(text[i : j + 1], strict=False))
    for word, value in _LITERALS.items():
        if text.startswith(word, i):
            return JsonNode(i, i + len(word), value)
    number = _JSON_NUMBER.match(text, i)
    if number is None:
        raise ValueError(f"no JSON value at {i}")
    return JsonNode(i, number.end(), json.loads(number.group()))


def locate_json(text: str) -> JsonNode | None:
    """The JSON value :func:`extract_json` reads from ``text``, with its positions; None when there is none."""
    try:
        target = extract_json(text)
    except ValueError:
        return None
    for start, _ in _json_candidates(text):
        try:
            node = _scan(text, start)
        except (ValueError, IndexError):
            continue
        if node.value == target:
            return node
    return None


# --- files -------------------------------------------------------------------------


def read_jsonl(path: Path, *, keys: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line of ``path`` (gzip-compressed when it ends in ``.gz``).

    A line that is not JSON, or not a JSON object, is a :class:`ConfigError` that
    names ``file:line``; ``keys`` says what each object should hold ("id and text").
    """
    try:
        with gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else path.open(encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ConfigError(f"{path}:{n}: not valid JSON ({exc.msg}, column {exc.colno})") from None
                if not isinstance(row, dict):
                    raise ConfigError(f"{path}:{n}: expected a JSON object with {keys}")
                yield n, row
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot be read ({exc})") from None


def load_yaml(path: Path, *, missing: str) -> Any:
    """The YAML document in ``path`` (None when empty).

    A missing file is a :class:`ConfigError` "``path``: ``missing``"; bad YAML one that names
    the file, the line and the problem.
    """
    import yaml  # here, so importing orchestrion does not import the YAML parser

    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: {missing}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot be read ({exc})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "the file"
        raise ConfigError(f"{path}: {where} is not valid YAML: {getattr(exc, 'problem', exc)}") from None

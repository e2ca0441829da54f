"""The ``retrieve`` tool: Okapi BM25 over a local corpus the user names.

A corpus is either a folder of ``.txt`` / ``.md`` files (one document per file,
its id the path relative to the folder) or a JSONL file whose lines carry
``id`` and ``text`` (an optional ``title`` is prepended to the text). Problems
with the corpus are :class:`~orchestrion._errors.ConfigError` with a one-line
message that names the file (and line). Ranking is plain BM25 (k1=1.5,
b=0.75) with a lowercase word tokenizer (:mod:`._ranking`); no third-party search library.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from .._errors import ConfigError
from .._text import read_jsonl
from ._ranking import BM25, WORD, tokenize
from .envelope import ToolResult, ToolStatus
from .registry import Tool

if TYPE_CHECKING:
    from .context import ToolContext

SNIPPET_CHARS = 240


@dataclass(frozen=True)
class Hit:
    id: str
    score: float
    text: str


class Corpus:
    """Documents indexed for BM25 ranking."""

    def __init__(self, docs: Iterable[tuple[str, str]], source: str = "") -> None:
        self.source = source
        pairs = list(docs)
        self.ids: list[str] = [doc_id for doc_id, _ in pairs]
        self.texts: list[str] = [text for _, text in pairs]
        self._index = BM25(self.texts)

    def __len__(self) -> int:
        return len(self.ids)

    def search(self, query: str, k: int = 3) -> list[Hit]:
        """The ``k`` best documents for ``query`` by BM25; documents sharing no term are left out."""
        scores = self._index.scores(query)
        best = sorted(scores.items(), key=lambda item: (-item[1], self.ids[item[0]]))[:k]
        return [Hit(self.ids[i], score, self.texts[i]) for i, score in best]

    @classmethod
    def from_path(cls, path: str | Path) -> Corpus:
        """Load a folder of .txt/.md files or a .jsonl file."""
        root = Path(path).expanduser()
        if not root.exists():
            raise ConfigError(f"corpus not found: {root} (expected a folder of .txt/.md files or a .jsonl file)")
        if root.is_dir():
            return cls(_read_folder(root), source=str(root))
        if root.suffix.lower() in (".jsonl", ".ndjson"):
            return cls(_read_jsonl(root), source=str(root))
        raise ConfigError(f"corpus {root}: expected a folder of .txt/.md files or a .jsonl file")


def _read_folder(root: Path) -> list[tuple[str, str]]:
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in (".txt", ".md"))
    if not files:
        raise ConfigError(f"corpus folder {root} has no .txt or .md files")
    docs = []
    for file in files:
        try:
            docs.append((file.relative_to(root).as_posix(), file.read_text(encoding="utf-8", errors="replace")))
        except OSError as exc:
            raise ConfigError(f"corpus file {file} cannot be read: {exc.strerror}") from None
    return docs


def _read_jsonl(path: Path) -> list[tuple[str, str]]:
    docs: dict[str, str] = {}
    for number, record in read_jsonl(path, keys="'id' and 'text'"):
        for field in ("id", "text"):
            if record.get(field) in (None, ""):
                raise ConfigError(f"{path}:{number}: missing or empty field '{field}'")
        doc_id, text = str(record["id"]), str(record["text"])
        if doc_id in docs:
            raise ConfigError(f"{path}:{number}: duplicate id '{doc_id}'")
        docs[doc_id] = f"{record['title']}\n{text}" if record.get("title") else text
    if not docs:
        raise ConfigError(f"corpus file {path} has no documents")
    return list(docs.items())


def snippet(text: str, query: str, limit: int = SNIPPET_CHARS) -> str:
    """One line of ``text`` around the first query term it contains."""
    flat = " ".join(text.split())
    terms = set(tokenize(query))
    first = next((m.start() for m in WORD.finditer(flat) if m.group().lower() in terms), 0)
    start = max(0, first - limit // 4)
    piece = flat[start : start + limit]
    return ("..." if start else "") + piece + ("..." if start + limit < len(flat) else "")


class RetrievalArgs(BaseModel):
    query: str = Field(min_length=1, max_length=1000, description="what to look for")
    k: int = Field(3, ge=1, le=20, description="how many passages to return")


class RetrievalTool(Tool):
    """Searches the configured corpus with BM25 and returns the best passages."""

    name = "retrieve"
    description = "search the local document corpus (BM25) and return the best-matching passages"
    Args = RetrievalArgs
    kind = "tool"

    def __init__(self, corpus: Corpus | str | Path | None = None) -> None:
        self.corpus = corpus if corpus is None or isinstance(corpus, Corpus) else Corpus.from_path(corpus)

    async def run(self, args: Any, ctx: ToolContext | None, model: str | None) -> ToolResult:
        parsed = args if isinstance(args, RetrievalArgs) else RetrievalArgs.model_validate(args)
        if self.corpus is None:
            error = "retrieve: no corpus is configured; pass --corpus PATH (a folder of .txt/.md files or a .jsonl)"
            return ToolResult(status=ToolStatus.EXEC_ERROR, error=error)
        hits = await asyncio.to_thread(self.corpus.search, parsed.query, parsed.k)  # off the event loop
        data: dict[str, Any] = {"hits": [{"id": h.id, "score": round(h.score, 4)} for h in hits]}
        if not hits:
            return ToolResult(output=f"no document matches '{parsed.query}'", data=data)
        return ToolResult(output="\n".join(f"[{h.id}] {snippet(h.text, parsed.query)}" for h in hits), data=data)

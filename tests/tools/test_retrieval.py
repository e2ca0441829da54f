"""BM25 retrieval: ranking, corpus loading, one-line config errors, and the tool envelope."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from orchestrion._errors import ConfigError
from orchestrion.tools._ranking import tokenize
from orchestrion.tools.envelope import ToolStatus
from orchestrion.tools.registry import ToolRegistry
from orchestrion.tools.retrieval import Corpus, RetrievalTool, snippet


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    (root / "astro").mkdir(parents=True)
    (root / "astro" / "mars.md").write_text("# Mars\nMars is the fourth planet. Mars has two moons.")
    (root / "venus.txt").write_text("Venus is the second planet and the hottest planet.")
    (root / "cooking.txt").write_text("Bread needs flour, water, salt and yeast.")
    (root / "ignored.py").write_text("planet = 'not a document'")
    return root


@pytest.fixture
def jsonl(tmp_path: Path) -> Path:
    path = tmp_path / "corpus.jsonl"
    rows = [
        {"id": "d1", "title": "Photosynthesis", "text": "Plants turn light into chemical energy."},
        {"id": 2, "text": "The mitochondria is the powerhouse of the cell."},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    return path


def test_tokenize_lowercases_words() -> None:
    assert tokenize("Mars, MARS! e-mail 42x") == ["mars", "mars", "e", "mail", "42x"]


def test_folder_corpus_uses_relative_paths_as_ids(folder: Path) -> None:
    corpus = Corpus.from_path(folder)
    assert sorted(corpus.ids) == ["astro/mars.md", "cooking.txt", "venus.txt"]
    hits = corpus.search("mars moons", k=3)
    assert [h.id for h in hits] == ["astro/mars.md"]  # documents sharing no term are left out
    assert "fourth planet" in hits[0].text


def test_ranking_prefers_rarer_terms_and_respects_k(folder: Path) -> None:
    corpus = Corpus.from_path(folder)
    hits = corpus.search("hottest planet", k=1)
    assert [h.id for h in hits] == ["venus.txt"]
    both = corpus.search("planet", k=5)
    assert {h.id for h in both} == {"astro/mars.md", "venus.txt"}
    assert both[0].score >= both[1].score > 0


def test_bm25_score_matches_the_formula() -> None:
    corpus = Corpus([("a", "apple apple banana"), ("b", "banana cherry"), ("c", "cherry date fig grape")])
    (hit,) = [h for h in corpus.search("apple", k=3)]
    n, df, tf, dl, avgdl = 3, 1, 2, 3, (3 + 2 + 4) / 3
    idf = math.log((n - df + 0.5) / (df + 0.5) + 1)
    expected = idf * tf * 2.5 / (tf + 1.5 * (1 - 0.75 + 0.75 * dl / avgdl))
    assert hit.id == "a" and hit.score == pytest.approx(expected)


def test_jsonl_corpus_with_title_and_numeric_id(jsonl: Path) -> None:
    corpus = Corpus.from_path(jsonl)
    assert corpus.ids == ["d1", "2"]
    assert corpus.search("photosynthesis", k=1)[0].id == "d1"  # the title is searchable
    assert corpus.search("powerhouse cell", k=1)[0].id == "2"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"id": "a", "text": "fine"}\n{"id": "b", "text": oops}\n', ":2: not valid JSON"),
        ('{"id": "a", "text": "fine"}\n{"text": "no id"}\n', ":2: missing or empty field 'id'"),
        ('{"id": "a"}\n', ":1: missing or empty field 'text'"),
        ('["a", "b"]\n', ":1: expected a JSON object"),
        ('{"id": "a", "text": "x"}\n{"id": "a", "text": "y"}\n', ":2: duplicate id 'a'"),
        ("\n\n", "has no documents"),
    ],
)
def test_bad_jsonl_is_a_one_line_config_error(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(ConfigError) as info:
        Corpus.from_path(path)
    assert message in str(info.value) and str(path) in str(info.value)
    assert "\n" not in str(info.value)


def test_missing_or_unsuitable_paths_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="corpus not found: .*nowhere"):
        Corpus.from_path(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="has no .txt or .md files"):
        Corpus.from_path(tmp_path / "empty")
    (tmp_path / "table.csv").write_text("a,b\n")
    with pytest.raises(ConfigError, match="table.csv"):
        Corpus.from_path(tmp_path / "table.csv")


def test_snippet_is_one_line_around_the_match() -> None:
    text = "intro " * 100 + "the needle\nis here " + "outro " * 100
    piece = snippet(text, "needle", limit=60)
    assert "needle" in piece and "\n" not in piece
    assert piece.startswith("...") and piece.endswith("...")


async def test_tool_lists_hits_as_id_and_snippet(folder: Path) -> None:
    registry = ToolRegistry([RetrievalTool(str(folder))])
    result = await registry.call("retrieve", {"query": "second planet", "k": 2})
    assert result.status is ToolStatus.OK
    lines = result.output.splitlines()
    assert lines[0].startswith("[venus.txt] Venus is the second planet")
    assert len(lines) == 2 and lines[1].startswith("[astro/mars.md] ")
    assert [h["id"] for h in result.data["hits"]] == ["venus.txt", "astro/mars.md"]


async def test_tool_reports_no_match_and_missing_corpus(folder: Path) -> None:
    registry = ToolRegistry([RetrievalTool(Corpus.from_path(folder))])
    nothing = await registry.call("retrieve", {"query": "quantum chromodynamics"})
    assert nothing.status is ToolStatus.OK and "no document matches" in nothing.output
    bare = await ToolRegistry([RetrievalTool(None)]).call("retrieve", {"query": "planet"})
    assert bare.status is ToolStatus.EXEC_ERROR
    assert "--corpus PATH" in (bare.error or "")


@pytest.mark.parametrize("args", [{"query": "planet", "k": 0}, {"query": "planet", "k": 21}, {"k": 3}])
async def test_tool_invalid_args(folder: Path, args: dict[str, object]) -> None:
    result = await ToolRegistry([RetrievalTool(folder)]).call("retrieve", args)
    assert result.status is ToolStatus.INVALID_ARGS

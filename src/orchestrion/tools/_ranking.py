"""Ranking documents against a query: one tokenizer and two scorers, side by side.

- :class:`BM25` (Okapi, k1=1.5, b=0.75) ranks passages for the ``retrieve`` tool;
- :class:`TfIdf` (sublinear tf, smoothed idf, cosine) finds the past task prompts nearest
  to a new one for the ``router`` strategy (:func:`nearest`).

Both read text through :func:`tokenize`; the router asks for ``arithmetic`` tokens so that
tasks of one kind match whatever their numbers. No third-party search library.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence

K1, B = 1.5, 0.75
WORD = re.compile(r"\w+")
_MATH = re.compile(r"\d+(?:\.\d+)?|[^\W\d_]+|[+\-*/^=%<>]")
_TIE = 1e-9


def tokenize(text: str, *, arithmetic: bool = False) -> list[str]:
    """Lower-case word tokens (letters, digits, underscore; any script).

    With ``arithmetic``: words of letters, arithmetic symbols as tokens, and ``<num>`` for every number.
    """
    if not arithmetic:
        return WORD.findall(text.lower())
    return ["<num>" if tok[0].isdigit() else tok for tok in _MATH.findall(text.lower())]


class BM25:
    """Okapi BM25 over a list of documents (``K1``, ``B``); idf is never negative."""

    def __init__(self, docs: Sequence[str]) -> None:
        self._n = len(docs)
        self._lengths: list[int] = []
        self._postings: dict[str, list[tuple[int, int]]] = {}  # term -> [(doc index, term frequency)]
        for index, text in enumerate(docs):
            tokens = tokenize(text)
            self._lengths.append(len(tokens))
            for term, tf in Counter(tokens).items():
                self._postings.setdefault(term, []).append((index, tf))
        self._avg_length = sum(self._lengths) / len(self._lengths) if self._lengths else 0.0

    def _idf(self, term: str) -> float:
        df = len(self._postings.get(term, ()))
        return math.log((self._n - df + 0.5) / (df + 0.5) + 1.0)

    def scores(self, query: str) -> dict[int, float]:
        """BM25 score of ``query`` per document index; documents sharing no term are left out."""
        scores: dict[int, float] = {}
        for term in set(tokenize(query)):
            idf = self._idf(term)
            for index, tf in self._postings.get(term, ()):
                norm = K1 * (1.0 - B + B * self._lengths[index] / (self._avg_length or 1.0))
                scores[index] = scores.get(index, 0.0) + idf * tf * (K1 + 1.0) / (tf + norm)
        return scores


class TfIdf:
    """TF-IDF vectors (sublinear tf, smoothed idf, L2-normalised) of ``arithmetic`` tokens over a list of documents."""

    def __init__(self, docs: Sequence[str], *, min_df: int = 1) -> None:
        counts = [Counter(tokenize(d, arithmetic=True)) for d in docs]
        n = len(docs)
        df: Counter[str] = Counter()
        for c in counts:
            df.update(c.keys())
        self._n, self._min_df = n, min_df
        self.idf = {t: math.log((1 + n) / (1 + f)) + 1.0 for t, f in df.items() if f >= min_df}
        self.vectors = [self._vector(c) for c in counts]

    def _vector(self, counts: Mapping[str, int]) -> dict[str, float]:
        # idf of a term no document has (or, with min_df > 1, fewer than min_df have: such a term is left out)
        unseen = math.log(1 + self._n) + 1.0 if self._min_df <= 1 else 0.0
        vec = {t: (1.0 + math.log(c)) * self.idf.get(t, unseen) for t, c in counts.items()}
        vec = {t: w for t, w in vec.items() if w}
        norm = math.sqrt(sum(w * w for w in vec.values()))
        return {t: w / norm for t, w in vec.items()} if norm else {}

    def similarities(self, query: str) -> list[float]:
        """Cosine similarity of ``query`` to each document, in document order."""
        q = self._vector(Counter(tokenize(query, arithmetic=True)))
        return [sum(w * doc.get(t, 0.0) for t, w in q.items()) for doc in self.vectors]


def nearest(query: str, docs: Sequence[str], k: int, *, min_df: int = 1) -> list[tuple[int, float]]:
    """Indices and TF-IDF similarities of the ``k`` documents most similar to ``query``.

    Only documents with similarity > 0 are returned; equal similarities keep
    document order. With ``min_df`` > 1, only terms that at least that many documents
    share count: a word one past task alone has (a name, the words of a list to sort)
    says nothing about which kind of task it is.
    """
    if not docs or k <= 0:
        return []
    sims = TfIdf(docs, min_df=min_df).similarities(query)
    ranked = sorted((i for i, s in enumerate(sims) if s > _TIE), key=lambda i: (-sims[i], i))
    return [(i, sims[i]) for i in ranked[:k]]

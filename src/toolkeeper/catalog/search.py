"""Finding tools by what they do: BM25 over each tool's entry as clients would receive it.

What is indexed of a tool: its name cut into words (`notes__create_note`, `listIssues`), twice,
since a name is the densest description a tool has; its title; its description (with the
notes a person attached); and the names of its parameters. Words are lower-cased, English stop
words dropped and the rest stemmed (Snowball), so "notes" finds "note" and "created" "create".

An index is made once for a list of entries and answers any number of queries; `allowed`
limits one query to the tools a caller may see, so one index serves every scope, and a tool
outside the caller's scope is never among its matches.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy

MAX_QUERY_CHARS = 500
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_stemmer_lock = threading.Lock()


@dataclass(frozen=True, slots=True)
class Match:
    name: str
    score: float
    position: int  # the entry's position in the list the index was built from


def words_of(text: str) -> list[str]:
    """`listIssues` → list issues; `notes__create_note` → notes create note; `HTTPServer` → http server."""
    return [word.lower() for word in _WORD.findall(text)]


def _parameter_names(schema: Any) -> list[str]:
    if not isinstance(schema, Mapping):
        return []
    properties = schema.get("properties")
    return [name for name in properties if isinstance(name, str)] if isinstance(properties, Mapping) else []


def document_of(entry: Mapping[str, Any]) -> str:
    """The words of one `tools/list` entry that a query is matched against."""
    name = str(entry.get("name", ""))
    parts = [name, name]
    for key in ("title", "description"):
        value = entry.get(key)
        if isinstance(value, str):
            parts.append(value)
    annotations = entry.get("annotations")
    if isinstance(annotations, Mapping) and isinstance(annotations.get("title"), str):
        parts.append(annotations["title"])
    parts.extend(_parameter_names(entry.get("inputSchema")))
    return " ".join(" ".join(words_of(part)) for part in parts)


class SearchIndex:
    """BM25 (Lucene's variant, from bm25s) over a fixed list of entries."""

    def __init__(self, entries: Sequence[Mapping[str, Any]]) -> None:
        import bm25s
        import numpy

        # bm25s sets its own logger to DEBUG at import, which would write a line per index made.
        logging.getLogger("bm25s").setLevel(logging.WARNING)
        self.names = [str(entry.get("name", "")) for entry in entries]
        self._positions = {name: position for position, name in enumerate(self.names)}
        self._numpy = numpy
        self._stem = _stemmer()
        self._retriever: Any = None
        if entries:
            corpus = bm25s.tokenize(
                [document_of(entry) for entry in entries],
                stopwords="en",
                stemmer=self._stem,
                show_progress=False,
            )
            self._retriever = bm25s.BM25()
            self._retriever.index(corpus, show_progress=False)

    def __len__(self) -> int:
        return len(self.names)

    def mask_for(self, allowed: Collection[str]) -> numpy.ndarray:
        """A weight mask keeping only `allowed` names: made once per scope, reused per query."""
        mask = self._numpy.zeros(len(self.names), dtype="float32")
        for name in allowed:
            position = self._positions.get(name)
            if position is not None:
                mask[position] = 1.0
        return mask

    def search(self, query: str, limit: int, mask: numpy.ndarray | None = None) -> list[Match]:
        """The best `limit` matches with a score above zero, best first; ties keep list order."""
        if self._retriever is None or limit <= 0:
            return []
        terms = self._terms(query)
        if not terms:
            return []
        scores = self._retriever.get_scores(terms)
        if mask is not None:
            scores = scores * mask
        numpy = self._numpy
        limit = min(limit, len(scores))
        candidates = numpy.argpartition(-scores, limit - 1)[:limit]
        # Stable order: by score, then by position in the listing.
        ranked = sorted(candidates.tolist(), key=lambda position: (-float(scores[position]), position))
        return [Match(self.names[p], float(scores[p]), p) for p in ranked if scores[p] > 0]

    def _terms(self, query: str) -> list[str]:
        import bm25s

        words = " ".join(words_of(query))
        tokens = bm25s.tokenize(
            words, stopwords="en", stemmer=self._stem, return_ids=False, show_progress=False
        )
        return list(tokens[0]) if tokens else []


def _stemmer() -> Any:
    """The Snowball English stemmer. PyStemmer's objects are not safe to share between
    threads, so each index holds its own and stems under a lock."""
    import Stemmer

    stemmer = Stemmer.Stemmer("english")

    def stem(words: list[str]) -> list[str]:
        with _stemmer_lock:
            return stemmer.stemWords(words)  # type: ignore[no-any-return]

    return stem

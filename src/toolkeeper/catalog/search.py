"""Finding tools by what they do: BM25 over each tool's entry as clients would receive it.

What is indexed of a tool: its name cut into words (`notes__create_note`, `listIssues`), twice,
since a name is the densest description a tool has; its title; its description (with the
notes a person attached); and the names of its parameters. Words are lower-cased, English stop
words dropped and the rest stemmed (Snowball), so "notes" finds "note" and "created" "create".
A second, short index holds each tool's headline (name, title, the description's first
sentence), and a tool's score is the sum of both: a word in what a tool says it is counts for
more than the same word deep in its notes, as it would with a field weight.

A person names an action in their own words ("make", "remove") where a tool uses its verb
(`create`, `delete`), and says "repo" where a description says "repository": a query word of
a verb family also looks for the family's other verbs, at a quarter of a word's weight (so a
tool named by the query's own verb still comes first), and a short word also looks for the
long one it stands for (bench/search_eval.py measures both).

An index is made once for a list of entries and answers any number of queries; a mask
limits one query to the tools a caller may see, so one index serves every scope, and a tool
outside the caller's scope is never among its matches.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy

MAX_QUERY_CHARS = 500
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s|\n")
_HEADLINE_CHARS = 200
_stemmer_lock = threading.Lock()

# Verbs that name the same action, as people and APIs say it. A word may be in two families.
VERB_FAMILIES = (
    ("create", "add", "new", "make", "insert", "post", "write", "build", "generate", "register"),
    ("delete", "remove", "erase", "drop", "destroy", "trash", "purge", "discard", "clear"),
    ("get", "read", "retrieve", "fetch", "show", "view", "see", "look", "display", "open", "download"),
    ("list", "show", "all", "browse", "enumerate"),
    ("update", "change", "edit", "modify", "patch", "set", "rename", "replace", "mark"),
    ("send", "post", "deliver", "notify"),
    ("search", "find", "lookup", "query", "look"),
    ("stop", "cancel", "end", "close", "terminate", "abort", "kill"),
    ("start", "run", "trigger", "dispatch", "play", "resume", "begin", "launch", "execute"),
)
FAMILY_WEIGHT = 0.25
# Short words and the longer words tools spell out; the query keeps its own word too.
SPELLED_OUT = {
    "repo": "repository",
    "pr": "pull request",
    "folder": "directory",
    "ticket": "issue",
    "photo": "image",
    "picture": "image",
    "song": "track",
}


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


def _title_of(entry: Mapping[str, Any]) -> str:
    title = entry.get("title")
    annotations = entry.get("annotations")
    if not isinstance(title, str) and isinstance(annotations, Mapping):
        title = annotations.get("title")
    return title if isinstance(title, str) else ""


def _words(parts: Iterable[str]) -> list[str]:
    return [word for part in parts for word in words_of(part)]


def _document_words(entry: Mapping[str, Any]) -> list[str]:
    name = str(entry.get("name", ""))
    description = entry.get("description")
    parts = [name, name, _title_of(entry), description if isinstance(description, str) else ""]
    parts.extend(_parameter_names(entry.get("inputSchema")))
    return _words(parts)


def _headline_words(entry: Mapping[str, Any]) -> list[str]:
    description = entry.get("description")
    first = _SENTENCE_END.split(description.strip(), maxsplit=1)[0] if isinstance(description, str) else ""
    return _words([str(entry.get("name", "")), _title_of(entry), first[:_HEADLINE_CHARS]])


def document_of(entry: Mapping[str, Any]) -> str:
    """The words of one `tools/list` entry that a query is matched against."""
    return " ".join(_document_words(entry))


def headline_of(entry: Mapping[str, Any]) -> str:
    """The words of what a tool says it is: its name, its title, its description's first sentence."""
    return " ".join(_headline_words(entry))


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
        self._stop_words = frozenset(bm25s.stopwords.STOPWORDS_EN)
        self._stems: dict[str, str] = {}  # each word's stem, stemmed once
        self._families = _families(self._stem)
        self._spelled_out = {self._stem([short])[0]: self._terms(long) for short, long in SPELLED_OUT.items()}
        self._retrievers: list[Any] = []
        if entries:
            self._retrievers = [
                self._retriever([_document_words(entry) for entry in entries]),
                self._retriever([_headline_words(entry) for entry in entries]),
            ]

    def _retriever(self, documents: list[list[str]]) -> Any:
        import bm25s

        self._learn(word for words in documents for word in words)
        retriever = bm25s.BM25()
        retriever.index([self._known_stems(words) for words in documents], show_progress=False)
        return retriever

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
        if not self._retrievers or limit <= 0:
            return []
        terms = self._terms(query)
        if not terms:
            return []
        terms += self._spelled_out_terms(terms)
        scores = self._scores(terms, self._related(terms))
        if mask is not None:
            scores = scores * mask
        numpy = self._numpy
        limit = min(limit, len(scores))
        candidates = numpy.argpartition(-scores, limit - 1)[:limit]
        # Stable order: by score, then by position in the listing.
        ranked = sorted(candidates.tolist(), key=lambda position: (-float(scores[position]), position))
        return [Match(self.names[p], float(scores[p]), p) for p in ranked if scores[p] > 0]

    def _spelled_out_terms(self, terms: list[str]) -> list[str]:
        return [term for short in terms for term in self._spelled_out.get(short, ())]

    def _related(self, terms: list[str]) -> list[str]:
        """The other verbs of the families of the query's verbs."""
        verbs = dict.fromkeys(verb for term in terms for verb in self._families.get(term, ()))
        return [verb for verb in verbs if verb not in terms]

    def _scores(self, terms: list[str], related: list[str]) -> numpy.ndarray:
        """Each tool's score: its document's and its headline's, a related verb's at its weight."""
        scores = self._numpy.zeros(len(self.names), dtype="float32")
        for retriever in self._retrievers:
            scores += self._scores_in(retriever, terms)
            scores += FAMILY_WEIGHT * self._scores_in(retriever, related)
        return scores

    def _scores_in(self, retriever: Any, terms: list[str]) -> numpy.ndarray:
        known = [term for term in terms if term in retriever.vocab_dict]
        if not known:
            return self._numpy.zeros(len(self.names), dtype="float32")
        scores: numpy.ndarray = retriever.get_scores(known)
        return scores

    def _terms(self, text: str) -> list[str]:
        """The stems a query is matched by. Its new words are stemmed, not remembered: an index
        never changes once made, however many queries it answers."""
        words = self._indexable(words_of(text))
        new = [word for word in dict.fromkeys(words) if word not in self._stems]
        fresh = dict(zip(new, self._stem(new), strict=True)) if new else {}
        return [self._stems.get(word) or fresh[word] for word in words]

    def _indexable(self, words: Iterable[str]) -> list[str]:
        """Stop words and single letters are never indexed."""
        return [word for word in words if len(word) > 1 and word not in self._stop_words]

    def _learn(self, words: Iterable[str]) -> None:
        """Stem every word not seen yet, all at once."""
        new = self._indexable(set(words) - self._stems.keys())
        if new:
            self._stems.update(zip(new, self._stem(new), strict=True))

    def _known_stems(self, words: list[str]) -> list[str]:
        return [self._stems[word] for word in words if word in self._stems]


def _families(stem: Any) -> dict[str, tuple[str, ...]]:
    """Each stemmed verb, and the stemmed verbs of every family it is in (itself included)."""
    related: dict[str, dict[str, None]] = {}
    for family in VERB_FAMILIES:
        stems = stem(list(family))
        for verb in stems:
            related.setdefault(verb, {}).update(dict.fromkeys(stems))
    return {verb: tuple(others) for verb, others in related.items()}


def _stemmer() -> Any:
    """The Snowball English stemmer. PyStemmer's objects are not safe to share between
    threads, so each index holds its own and stems under a lock."""
    import Stemmer

    stemmer = Stemmer.Stemmer("english")

    def stem(words: list[str]) -> list[str]:
        with _stemmer_lock:
            return stemmer.stemWords(words)  # type: ignore[no-any-return]

    return stem

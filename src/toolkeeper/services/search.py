"""Finding tools by what they do, for every face: the model's `find-tools`, `toolkeeper search`
and the dashboard's search box ask the same question here and hear the same answer.

What is searched is whatever the caller may see and nothing more: the running gateway hands in
a `Ranking` already limited to the caller's scope, so a tool outside it is never found, and
nothing in the answer hints that it exists.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from toolkeeper.catalog import tokens
from toolkeeper.catalog.search import MAX_QUERY_CHARS
from toolkeeper.display import first_line
from toolkeeper.errors import ServiceError

DEFAULT_LIMIT = 5
MAX_LIMIT = 20
# A match's description, as one line: enough to choose by, short enough to list twenty.
MATCH_LINE_MAX = 160


class Ranking(Protocol):
    """The tools one caller may see, best first for a query: each as a `tools/list` entry."""

    def rank(self, query: str, limit: int) -> Sequence[Mapping[str, Any]]: ...


@dataclass(frozen=True, slots=True)
class Found:
    name: str
    title: str | None
    line: str  # the first line of its description
    tokens: int  # its definition's estimated tokens (catalog/tokens.py)
    listed: bool  # already in the caller's tools/list

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "description": self.line,
            "tokens": self.tokens,
            "listed": self.listed,
        }


@dataclass(frozen=True, slots=True)
class SearchAnswer:
    query: str
    found: tuple[Found, ...]

    @property
    def no_match(self) -> str:
        """That nothing matched, and what to try, in words every face can use; a face adds its
        own way to see every tool (`nothing` is the model's)."""
        return f"No tool matches '{self.query}'. Try other words: what the tool does, or a word of its name."

    @property
    def nothing(self) -> str:
        """What to say to the model when nothing matched."""
        return (
            f"No tool matches '{self.query}'. Try other words (what the tool does, or a word of its "
            "name), or call list-available-tools to see every tool."
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "query": self.query,
            "matches": [found.as_json() for found in self.found],
            "encoding": tokens.ENCODING,
        }


def checked_query(query: object) -> str:
    """The query as searched, or a refusal that says what a query must be."""
    if not isinstance(query, str) or not query.strip():
        raise ServiceError("The search query is empty: say in a few words what the tool should do.")
    query = query.strip()
    if len(query) > MAX_QUERY_CHARS:
        raise ServiceError(
            f"The search query is {len(query):,} characters long; at most {MAX_QUERY_CHARS} are "
            "searched. Say in a few words what the tool should do."
        )
    return query


def checked_limit(limit: object) -> int:
    if limit is None:
        return DEFAULT_LIMIT
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise ServiceError(f"limit must be a whole number from 1 to {MAX_LIMIT}, got {limit!r}.")
    return limit


def search_tools(
    ranking: Ranking, query: object, limit: object = None, *, listed: Collection[str] = ()
) -> SearchAnswer:
    """The tools that best match `query`, best first, at most `limit` of them; `listed` names
    the tools already in the caller's list, so each match says whether it is."""
    text = checked_query(query)
    entries = ranking.rank(text, checked_limit(limit))
    return SearchAnswer(text, tuple(_found(entry, listed) for entry in entries))


def _found(entry: Mapping[str, Any], listed: Collection[str]) -> Found:
    name = str(entry.get("name", ""))
    title = entry.get("title")
    annotations = entry.get("annotations")
    if not isinstance(title, str) and isinstance(annotations, Mapping):
        title = annotations.get("title")
    description = entry.get("description")
    line = first_line(description, MATCH_LINE_MAX) if isinstance(description, str) else ""
    return Found(
        name, title if isinstance(title, str) else None, line, tokens.tokens_of(entry), name in listed
    )

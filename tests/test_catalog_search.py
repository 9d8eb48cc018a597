"""The ranking's rules, each on a few tools (catalog/search.py): a person's verb finds a tool's,
a short word finds the long one, what a tool says it is outweighs a mention in its notes, and
a mask keeps a caller to its scope. tests/test_search_quality.py measures the whole on real
catalogs."""

from __future__ import annotations

from typing import Any

from toolkeeper.catalog.search import SearchIndex, headline_of


def tool(name: str, description: str = "", title: str | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": name, "description": description, "inputSchema": {"type": "object"}}
    if title is not None:
        entry["title"] = title
    return entry


NOTES = [
    tool("notes__list_notes", "Lists every note."),
    tool("notes__create_note", "Creates a note."),
    tool("notes__delete_note", "Deletes a note."),
    tool("calendar__list_events", "Lists the events of a calendar."),
]


def names(index: SearchIndex, query: str, limit: int = 3) -> list[str]:
    return [match.name for match in index.search(query, limit)]


def test_a_persons_verb_finds_the_tool_named_by_its_family() -> None:
    index = SearchIndex(NOTES)
    assert names(index, "make a note")[0] == "notes__create_note"
    assert names(index, "remove a note")[0] == "notes__delete_note"
    assert names(index, "show my notes")[0] == "notes__list_notes"


def test_the_querys_own_verb_comes_before_its_family() -> None:
    create, add = tool("notes__create_note", "Creates a note."), tool("notes__add_note", "Adds a note.")
    index = SearchIndex([create, add])
    assert names(index, "add a note") == ["notes__add_note", "notes__create_note"]
    assert names(index, "create a note") == ["notes__create_note", "notes__add_note"]


def test_a_short_word_finds_the_long_one_a_tool_spells_out() -> None:
    index = SearchIndex([tool("git__fork", "Forks a repository."), tool("git__star", "Stars a gist.")])
    assert names(index, "which repo") == ["git__fork"]
    index = SearchIndex([tool("git__open", "Opens a pull request."), tool("git__merge", "Merges a branch.")])
    assert names(index, "review a PR") == ["git__open"]


def test_what_a_tool_says_it_is_outweighs_a_mention_in_its_notes() -> None:
    archive = tool("chat__close", "Archives a channel.", title="Archive a channel")
    mentions = tool(
        "chat__info",
        "Returns a channel's details.\n\nNote: an archived channel is returned too; to archive a "
        "channel, use chat__close. Archive state is in `archived`.",
    )
    index = SearchIndex([mentions, archive])
    assert names(index, "archive a channel")[0] == "chat__close"
    assert headline_of(mentions) == "chat info returns a channel s details"


def test_a_mask_keeps_a_query_to_the_callers_tools() -> None:
    index = SearchIndex(NOTES)
    mask = index.mask_for(["calendar__list_events", "notes__delete_note"])
    assert [match.name for match in index.search("make a note", 5, mask)] == ["notes__delete_note"]
    assert [match.name for match in index.search("list", 5, mask)] == ["calendar__list_events"]


def test_a_query_of_stop_words_or_words_no_tool_has_finds_nothing() -> None:
    index = SearchIndex(NOTES)
    assert index.search("the of a", 5) == []
    assert index.search("zeppelin xylophone", 5) == []
    assert SearchIndex([]).search("note", 5) == []

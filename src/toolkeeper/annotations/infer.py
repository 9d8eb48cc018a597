"""Inference of behaviour hints and titles from a tool's name, title and description.

Follows the categories of ADR-017 (seed 003):

- list / search / get / read …            → read-only
- create / add / append / send …          → additive (not destructive), not idempotent
- update / edit … with a version argument → destructive, not idempotent (the etag changes)
- set / put / write / replace …           → destructive, idempotent (same end state)
- delete / remove …                       → destructive, idempotent (same end state)
- run / execute …                         → anything may change

Every value carries a reason a person can read. Inference only ever fills gaps: it never
overrides what a server declared or a person pinned (see `effective.py`), and by default its
values are suggestions that are shown, not emitted.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from toolkeeper.annotations.hints import input_properties


@dataclass(frozen=True)
class Suggestion:
    value: bool | str
    reason: str


@dataclass(frozen=True)
class Category:
    name: str
    verbs: frozenset[str]
    hints: Mapping[str, bool]
    why: str  # follows "the name's verb '<verb>'"


CATEGORIES: tuple[Category, ...] = (
    Category(
        "read",
        frozenset(
            "list search get read find fetch query show describe view check count lookup retrieve "
            "browse inspect status diff is has exists preview validate verify explain".split()
        ),
        {"readOnlyHint": True},
        "only reads: nothing is changed",
    ),
    Category(
        "create",
        frozenset(
            "create add append send post insert upload push commit reply comment new make fork clone "
            "publish invite submit attach share star follow subscribe init initialize generate".split()
        ),
        {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": False},
        "adds something new on each call: additive (nothing is lost), not idempotent",
    ),
    Category(
        "update",
        frozenset(
            "update edit modify patch rename move merge change increment transition close archive".split()
        ),
        {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False},
        "changes existing data in place (earlier values are lost)",
    ),
    Category(
        "write",
        frozenset(
            "set put write replace overwrite save upsert reset assign configure enable disable "
            "checkout lock unlock".split()
        ),
        {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": True},
        "replaces what is there with the given value: destructive, and repeating it "
        "with the same arguments leaves the same end state",
    ),
    Category(
        "delete",
        frozenset(
            "delete remove drop destroy purge erase clear revoke uninstall truncate unlink wipe kill "
            "terminate cancel".split()
        ),
        {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": True},
        "removes data: destructive, and deleting what is already gone leaves the same end state (idempotent)",
    ),
    Category(
        "execute",
        frozenset("run execute exec eval evaluate invoke trigger call".split()),
        {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False},
        "runs arbitrary code or commands: anything may change",
    ),
)
_CATEGORY_OF_VERB = {verb: c for c in CATEGORIES for verb in c.verbs}
# "create_or_update_file" puts a whole value whether or not it existed: a write.
_COMBINED = {frozenset({"create", "update"}): "write", frozenset({"add", "update"}): "write"}
_RISK = {c.name: i for i, c in enumerate(CATEGORIES)}
# Arguments that make an update conditional on the version read before (ADR-017's etag).
VERSION_ARGUMENTS = frozenset(
    "etag version revision rev ifmatch sha expectedversion expectedetag versionid lastmodified".split()
)
_OPEN_WORLD_WORDS = frozenset("web internet url urls http https browser website websites".split())
_OPEN_WORLD_TEXT = re.compile(r"\b(the web|internet|websites?|web pages?|any url|a url)\b", re.IGNORECASE)

ACRONYMS = {
    w.lower(): w
    for w in (
        "ID IDs URL URLs URI API APIs HTTP HTTPS JSON XML HTML CSS CSV SQL PDF SSH DNS IP UI MCP LLM AI "
        "AWS GCP S3 PR PRs SHA JWT OAuth CLI OS VM DB RSS SMS CI CD UUID WebDAV GitHub GitLab iCal vCard"
    ).split()
}
_SMALL_WORDS = frozenset("a an and as at by for from in into of on or the to with via".split())
_FIRST_SENTENCE = re.compile(r"[.;:\n]")
_SPLIT = re.compile(r"[\s_\-./:]+")
_CAMEL = re.compile(r"[A-Z]{2,}s?(?![a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")


def words(name: str) -> list[str]:
    """`nc_notes_createNote` → ['nc', 'notes', 'create', 'Note']; `getHTTPResponse` keeps 'HTTP'."""
    return [w for part in _SPLIT.split(name) if part for w in _CAMEL.findall(part)]


def _verb(word: str, *, stem: bool = False) -> str | None:
    lowered = word.lower()
    if lowered in _CATEGORY_OF_VERB:
        return lowered
    if stem:  # "Lists", "Searches", "Retrieves" at the start of a description
        for cut in ("es", "s"):
            if lowered.endswith(cut) and lowered[: -len(cut)] in _CATEGORY_OF_VERB:
                return lowered[: -len(cut)]
    return None


@dataclass(frozen=True)
class _Match:
    category: Category
    verb: str  # as shown in reasons: "verb 'delete'", "verbs 'read, append or delete'"
    position: int
    hints: Mapping[str, bool]
    why: str


def _single(category: Category, verb: str, position: int) -> _Match:
    return _Match(category, f"verb '{verb}'", position, category.hints, category.why)


def _find_category(tokens: list[str], *, stem: bool = False) -> _Match | None:
    """The category of the first verb in `tokens`.

    "create_or_update" is a write; "get_or_create" takes the riskier verb; a list of verbs
    ("Read, append, replace, or delete …") gets the worst case of each hint.
    """
    for i, token in enumerate(tokens):
        verb = _verb(token, stem=stem)
        if verb is None:
            continue
        verbs = [verb]
        for follower in tokens[i + 1 :]:
            if follower.lower() in ("or", "and"):
                continue
            if (other := _verb(follower, stem=stem)) is None:
                break
            verbs.append(other)
        category = _CATEGORY_OF_VERB[verb]
        if len(verbs) == 1:
            return _single(category, verb, i)
        pair = frozenset(verbs)
        if pair in _COMBINED:
            combined = next(c for c in CATEGORIES if c.name == _COMBINED[pair])
            return _single(combined, " or ".join(verbs), i)
        return _worst_case(verbs, i)
    return None


def _worst_case(verbs: list[str], position: int) -> _Match:
    categories = [_CATEGORY_OF_VERB[v] for v in verbs]
    riskiest = max(categories, key=lambda c: _RISK[c.name])
    writes = [c for c in categories if c.name != "read"]
    hints = {"readOnlyHint": not writes}
    if writes:
        hints["destructiveHint"] = any(c.hints["destructiveHint"] for c in writes)
        hints["idempotentHint"] = all(c.hints["idempotentHint"] for c in writes)
    listed = ", ".join(verbs[:-1]) + f" or {verbs[-1]}"
    return _Match(riskiest, f"verbs '{listed}'", position, hints, "together: the worst case of each hint")


def _has_version_argument(parameters: Iterable[str]) -> str | None:
    for name in parameters:
        if re.sub(r"[_\-]", "", name).lower() in VERSION_ARGUMENTS:
            return name
    return None


def humanize(tokens: Iterable[str]) -> str:
    out = []
    for i, token in enumerate(tokens):
        lowered = token.lower()
        if lowered in ACRONYMS:
            out.append(ACRONYMS[lowered])
        elif len(token) > 1 and token.rstrip("s").isupper():
            out.append(token)  # written in capitals by the author: keep it
        elif i > 0 and lowered in _SMALL_WORDS:
            out.append(lowered)
        else:
            out.append(token[:1].upper() + token[1:])
    return " ".join(out)


def title_from_name(name: str) -> Suggestion | None:
    """A human-readable title: `nc_notes_create_note` → "Create Note", `getHTTPStatus` → "Get HTTP Status".

    Words before the first verb are taken as a namespace and dropped (ADR-017's titles do that),
    unless nothing would follow the verb.
    """
    tokens = words(name)
    if not tokens:
        return None
    found = _find_category(tokens)
    reason = f"from the tool name {name!r}"
    if found and 0 < found.position < len(tokens) - 1:
        dropped = "_".join(tokens[: found.position])
        tokens = tokens[found.position :]
        reason += f", leaving out the leading {dropped!r} as a namespace"
    return Suggestion(humanize(tokens), reason)


def describe_parameter(name: str) -> str:
    return humanize(words(name)) or name


@dataclass(frozen=True)
class Inference:
    category: str | None
    verb: str | None
    # Per field (title and hints): the suggested value and why.
    suggestions: Mapping[str, Suggestion] = field(default_factory=dict)


def infer(tool: Mapping[str, Any]) -> Inference:
    """Suggestions for one declared tool (a raw `tools/list` entry)."""
    declared_annotations = tool.get("annotations")
    annotations = declared_annotations if isinstance(declared_annotations, Mapping) else {}
    title = tool.get("title") or annotations.get("title")
    return _infer(
        str(tool.get("name") or ""),
        title if isinstance(title, str) else None,
        tool.get("description") if isinstance(tool.get("description"), str) else None,
        tuple(input_properties(tool)),
    )


@lru_cache(maxsize=4096)
def _infer(name: str, title: str | None, description: str | None, parameters: tuple[str, ...]) -> Inference:
    suggestions: dict[str, Suggestion] = {}
    found = _find_category(words(name))
    where = "name"
    if found is None and title:
        found, where = _find_category(words(title)), "title"
    if found is None and description:
        # "Reads …", "Read, append, or delete …": only a sentence that starts with a verb counts.
        found, where = (
            _find_category(words(_FIRST_SENTENCE.split(description.strip(), 1)[0]), stem=True),
            "description",
        )
        if found is not None and found.position > 0:
            found = None
    category = verb = None
    if found is not None:
        category, verb = found.category.name, found.verb
        for hint, value in found.hints.items():
            suggestions[hint] = Suggestion(value, f"the {where}'s {verb} {found.why}")
        if found.category.name == "update":
            version = _has_version_argument(parameters)
            suggestions["idempotentHint"] = Suggestion(
                False,
                f"the {where}'s {verb} with the version argument {version!r}: a repeat carries a stale "
                "version and fails, so it is not idempotent (ADR-017)"
                if version
                else f"the {where}'s {verb} is not assumed idempotent; declare it if repeating "
                "changes nothing",
            )
    open_world = next((w for w in words(name) if w.lower() in _OPEN_WORLD_WORDS), None)
    if open_world:
        suggestions["openWorldHint"] = Suggestion(
            True, f"the name's word '{open_world}' reaches the open web"
        )
    elif description and (match := _OPEN_WORLD_TEXT.search(description)):
        suggestions["openWorldHint"] = Suggestion(True, f"the description mentions {match.group(0)!r}")
    if not title:
        suggested_title = title_from_name(name)
        if suggested_title:
            suggestions["title"] = suggested_title
    return Inference(category, verb, suggestions)

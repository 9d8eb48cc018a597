"""Every hint operation, once: explain, pin, accept a suggestion, clear. The configuration tools
and `toolkeeper hints` are thin faces over these.

Pins are global unless a toolset is named; a toolset's pin wins while that toolset is equipped.
Every request is checked in full before anything is written, and written in one transaction.

The approval policy relies on a pinned hint (a person stands behind it), so what a model asks for
(`by_person=False`) may only make a tool look riskier: a hint may be pinned to its cautious value
(readOnlyHint false, destructiveHint true, idempotentHint false, openWorldHint true), and a pin of
a cautious value may not be cleared. Titles and parameter descriptions spare no question.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from toolkeeper.annotations.effective import GLOBAL, Annotator, EffectiveHints, Overrides, scope_label
from toolkeeper.annotations.hints import (
    FIELDS,
    HINTS,
    PARAM_DESCRIPTION_MAX,
    SPEC_DEFAULTS,
    TITLE_MAX,
    Source,
    field_name,
    input_properties,
    is_text,
    unknown_field_message,
)
from toolkeeper.catalog import Catalog, CatalogTool
from toolkeeper.catalog.identity import canonical_json
from toolkeeper.errors import ErrorKind, ServiceError
from toolkeeper.services.toolsets import NOT_STARTED, Change, require_toolset_id
from toolkeeper.store import Store
from toolkeeper.store import overrides as pins_rows
from toolkeeper.store import toolsets as toolset_rows
from toolkeeper.store.overrides import PARAM
from toolkeeper.toolsets.model import ToolRef, check_toolset_name, resolve

ACCEPT_ALL = "all"
STALE = "This tool's hints changed since you opened the page; nothing was written. Look again and repeat."


class HintError(ServiceError):
    """A hint request that cannot be done."""


class HintService:
    def __init__(
        self,
        store: Store,
        catalog: Callable[[], Catalog | None],
        annotator: Callable[[], Annotator],
        on_change: Callable[[Change], Awaitable[None]] | None = None,
    ) -> None:
        self.store = store
        self._catalog = catalog
        self._annotator = annotator
        self._on_change = on_change

    # -- reading ---------------------------------------------------------------------------

    async def overrides(self) -> Overrides:
        async with self.store.read() as conn:
            return await pins_rows.load(conn)

    async def _current(self, toolset: str | None) -> tuple[Annotator, str | None]:
        """The rules with the pins as stored now, and the toolset whose pins apply."""
        async with self.store.read() as conn:
            overrides = await pins_rows.load(conn)
            if toolset is None:
                toolset = await toolset_rows.get_equipped(conn)
            else:
                await require_toolset_id(conn, check_toolset_name(toolset))
        return replace(self._annotator(), overrides=overrides), toolset

    def _live(self) -> Catalog:
        catalog = self._catalog()
        if catalog is None:
            raise HintError(NOT_STARTED, ErrorKind.UNAVAILABLE)
        return catalog

    def _tool(self, ref: Any) -> CatalogTool:
        return resolve(ToolRef.parse(ref), self._live())

    async def explain(self, ref: Any, toolset: str | None = None) -> dict[str, Any]:
        """Every field of one tool: its effective value, where it comes from, why, what is suggested."""
        tool = self._tool(ref)
        annotator, toolset = await self._current(toolset)
        return _explained(tool, annotator, toolset)

    async def explain_all(self, toolset: str | None = None) -> dict[str, Any]:
        catalog = self._live()
        annotator, toolset = await self._current(toolset)
        return {"toolset": toolset, "tools": [_explained(t, annotator, toolset) for t in catalog.tools]}

    async def briefs(self) -> dict[str, dict[str, Any]]:
        """Per tool, each field's value and source (and a suggestion for a gap): for tool listings."""
        catalog = self._live()
        annotator, toolset = await self._current(None)
        return {t.namespaced_name: _brief(annotator.effective(t, toolset)) for t in catalog.tools}

    async def version(self, ref: Any) -> str:
        """A fingerprint of every pin the tool has (any scope): a form made from it can tell, when
        it is sent, whether someone pinned or unpinned in between."""
        name = self._tool(ref).namespaced_name
        return pins_version(await self.overrides(), name)

    async def inherited(self, ref: Any, toolset: str | None = None) -> dict[str, Any]:
        """Each field as it would be with no pin of the tool in this scope (global, or the named
        toolset's): what unpinning it gives back. Shown beside a pin so a person knows what
        'inherit' means before choosing it."""
        tool = self._tool(ref)
        annotator, applied = await self._current(toolset)
        scope = GLOBAL if toolset is None else check_toolset_name(toolset)
        unpinned = {
            key: pins
            for key, pins in annotator.overrides.by_tool.items()
            if key != (scope, tool.namespaced_name)
        }
        without = replace(annotator, overrides=Overrides(MappingProxyType(unpinned)))
        fields = without.effective(tool, applied).fields
        return {
            name: {
                "value": fields[name].value,
                "source": fields[name].source.value,
                "reason": fields[name].reason,
            }
            for name in FIELDS
        }

    # -- writing ---------------------------------------------------------------------------

    async def set(
        self,
        ref: Any,
        fields: Mapping[str, Any] | None = None,
        parameters: Mapping[str, Any] | None = None,
        toolset: str | None = None,
        accept: list[str] | str | None = None,
        *,
        by_person: bool,
        version: str | None = None,
    ) -> dict[str, Any]:
        """Pin fields (a None value clears that pin), parameter descriptions and accepted
        suggestions. Without a person, only what makes the tool look riskier. With `version`
        (from `version()`), nothing is written if the tool's pins changed since."""
        tool = self._tool(ref)
        scope = GLOBAL if toolset is None else check_toolset_name(toolset)
        changes = _checked_fields(fields or {})
        changes.update(_checked_parameters(tool, parameters or {}))
        if accept:
            annotator, _ = await self._current(toolset)
            changes.update(_accepted(annotator.effective(tool, toolset), accept, changes))
        if not changes:
            raise HintError(
                "Nothing to set: give hints (e.g. readOnlyHint: false), parameter descriptions, or "
                "suggestions to accept."
            )
        async with self.store.write() as conn:
            await _require_version(conn, tool.namespaced_name, version)
            if toolset is not None:
                await require_toolset_id(conn, scope)
            if not by_person:
                pinned = (await pins_rows.load(conn)).pins(tool.namespaced_name, scope).fields
                _refuse_relaxing(tool.namespaced_name, scope, changes, pinned)
            cleared = await pins_rows.remove(
                conn, tool.namespaced_name, scope, [k for k, v in changes.items() if v is None]
            )
            for key, value in changes.items():
                if value is not None:
                    await pins_rows.put(conn, tool.namespaced_name, scope, key, value)
        await self._changed()
        pinned = {k: v for k, v in changes.items() if v is not None}
        result: dict[str, Any] = {
            "success": True,
            "tool": tool.namespaced_name,
            "scope": scope_label(scope),
            "pinned": pinned,
            "cleared": list(cleared),
            "hints": await self.explain(tool.namespaced_name, toolset),
        }
        not_pinned = [k for k, v in changes.items() if v is None and k not in cleared]
        if not_pinned:
            result["warnings"] = [f"Not pinned before, nothing to clear: {', '.join(not_pinned)}."]
        return result

    async def clear(
        self,
        ref: Any,
        fields: list[str] | None = None,
        toolset: str | None = None,
        *,
        by_person: bool,
        version: str | None = None,
    ) -> dict[str, Any]:
        """Unpin fields (every pin of the tool in that scope when none are named), to inherit again.
        Without a person, no pin of a cautious hint value. With `version`, nothing is cleared if
        the tool's pins changed since.

        Works with the servers offline too: a stored pin is found by its namespacedName.
        """
        catalog = self._catalog()
        name = self._tool(ref).namespaced_name if catalog is not None else ToolRef.parse(ref).key
        scope = GLOBAL if toolset is None else check_toolset_name(toolset)
        keys = None if not fields else [_field_key(f) for f in fields]
        async with self.store.write() as conn:
            await _require_version(conn, name, version)
            if not by_person:
                pinned = (await pins_rows.load(conn)).pins(name, scope).fields
                _refuse_relaxing(name, scope, dict.fromkeys(keys or pinned), pinned)
            removed = await pins_rows.remove(conn, name, scope, keys)
        if removed:
            await self._changed()
        return {
            "success": True,
            "tool": name,
            "scope": scope_label(scope),
            "cleared": list(removed),
            "message": f"Cleared {len(removed)} pin(s); {name} inherits those fields again."
            if removed
            else f"{name} had no such pins in scope {scope_label(scope)}; nothing changed.",
        }

    async def _changed(self) -> None:
        if self._on_change is not None:
            await self._on_change(Change.CONTENT)


def pins_version(overrides: Overrides, name: str) -> str:
    """A short fingerprint of every pin of one tool, in every scope."""
    pins = {
        scope: {"fields": dict(p.fields), "parameters": dict(p.parameters)}
        for (scope, tool), p in overrides.by_tool.items()
        if tool == name and p
    }
    return hashlib.sha256(canonical_json(pins).encode("utf-8")).hexdigest()[:16]


async def _require_version(conn: AsyncConnection, name: str, version: str | None) -> None:
    """Inside the write: refuse when the tool's pins are not what the form was made from."""
    if version is not None and pins_version(await pins_rows.load(conn), name) != version:
        raise HintError(STALE, ErrorKind.CONFLICT)


# -- checking input -----------------------------------------------------------------------


def _field_key(raw: Any) -> str:
    """A stored key from what a person typed: a hint or title name, or `param:<name>`."""
    if isinstance(raw, str) and raw.startswith(PARAM) and len(raw) > len(PARAM):
        return raw
    name = field_name(raw) if isinstance(raw, str) else None
    if name is None:
        raise HintError(unknown_field_message(str(raw)) + " Parameter descriptions are 'param:<name>'.")
    return name


def _checked_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(fields, Mapping):
        raise HintError('hints must be an object such as {"readOnlyHint": false, "title": "Update Note"}.')
    out: dict[str, Any] = {}
    for raw, value in fields.items():
        name = field_name(raw)
        if name is None:
            raise HintError(unknown_field_message(raw))
        if value is None:
            out[name] = None
        elif name == "title":
            if not is_text(value):
                raise HintError(f"title must be a non-empty text (or null to clear its pin), got {value!r}.")
            if len(value) > TITLE_MAX:
                raise HintError(f"title is {len(value)} characters; the limit is {TITLE_MAX}.")
            out[name] = value
        elif not isinstance(value, bool):
            raise HintError(f"{name} must be true or false (or null to clear its pin), got {value!r}.")
        else:
            out[name] = value
    return out


def _refuse_relaxing(name: str, scope: str, changes: Mapping[str, Any], pinned: Mapping[str, Any]) -> None:
    """A hint pinned to a value that could spare a question, or a cautious pin cleared (what it
    inherits may be laxer), relaxes how the tool's calls are decided: that needs a person."""
    for hint in HINTS:
        if hint not in changes:
            continue
        value = changes[hint]
        if value is None and pinned.get(hint) is not None and pinned[hint] == SPEC_DEFAULTS[hint]:
            why = f"clearing the pin {hint}={str(pinned[hint]).lower()}"
        elif value is not None and value != SPEC_DEFAULTS[hint]:
            why = f"pinning {hint}={str(value).lower()}"
        else:
            continue
        raise HintError(
            f"{name} ({scope_label(scope)}): {why} could let its calls run without asking, and relaxing "
            f"how calls are confirmed needs a person. Here a hint can only be pinned to its cautious "
            f"value ({', '.join(f'{h}={str(v).lower()}' for h, v in SPEC_DEFAULTS.items())}).",
            ErrorKind.CONFLICT,
        )


def _checked_parameters(tool: CatalogTool, parameters: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(parameters, Mapping):
        raise HintError('parameters must be an object such as {"category": "Folder to file the note in"}.')
    known = input_properties(tool.declared)
    out: dict[str, Any] = {}
    for name, text in parameters.items():
        if name not in known:
            have = ", ".join(known) or "none"
            raise HintError(f"{tool.namespaced_name} has no parameter {name!r} (its parameters: {have}).")
        if text is not None:
            if not is_text(text):
                raise HintError(
                    f"The description of {name!r} must be a non-empty text (or null to clear it)."
                )
            if len(text) > PARAM_DESCRIPTION_MAX:
                raise HintError(
                    f"The description of {name!r} is {len(text)} characters; "
                    f"the limit is {PARAM_DESCRIPTION_MAX}."
                )
        out[PARAM + name] = text
    return out


def _accepted(
    effective: EffectiveHints, accept: list[str] | str, changes: Mapping[str, Any]
) -> dict[str, Any]:
    """Pins for accepted suggestions: named fields, or `all` for every gap that has one."""
    names = [accept] if isinstance(accept, str) else list(accept)
    if names == [ACCEPT_ALL]:
        wanted = [
            name
            for name in FIELDS
            if effective.fields[name].source in (Source.DEFAULT, Source.INFERRED)
            and effective.fields[name].suggestion is not None
        ]
        wanted += [
            PARAM + name for name, p in effective.parameters.items() if p.source == "missing" and p.suggestion
        ]
        if not wanted:
            raise HintError("There is no suggestion for any missing field of this tool; nothing to accept.")
    else:
        wanted = [_field_key(n) for n in names]
    out: dict[str, Any] = {}
    for key in wanted:
        if key in changes:
            raise HintError(f"{key} is both set and accepted; give it once.")
        suggestion: bool | str | None  # a hint's suggestion is true/false, a text's is text
        if key.startswith(PARAM):
            param = effective.parameters.get(key[len(PARAM) :])
            suggestion = param.suggestion if param else None
        else:
            hint = effective.fields[key].suggestion
            suggestion = hint.value if hint else None
        if suggestion is None:
            raise HintError(f"There is no suggestion for {key} to accept; set a value instead.")
        out[key] = suggestion
    return out


# -- output -------------------------------------------------------------------------------


def _explained(tool: CatalogTool, annotator: Annotator, toolset: str | None) -> dict[str, Any]:
    policy = annotator.policy(tool.server)
    return {
        "namespacedName": tool.namespaced_name,
        "exposedName": tool.exposed_name,
        "server": tool.server,
        "trust": "trusted" if policy.trusted else "untrusted",
        "inferHints": "apply" if policy.apply_inferred else "suggest",
        "available": tool.available,
        "toolset": toolset,
        **annotator.effective(tool, toolset).as_json(),
    }


def _brief(effective: EffectiveHints) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in FIELDS:
        hint = effective.fields[name]
        entry: dict[str, Any] = {"value": hint.value, "source": hint.source.value}
        if hint.source is Source.DEFAULT and hint.suggestion is not None:
            entry["suggested"] = hint.suggestion.value
        out[name] = entry
    return out

"""Every toolset and note operation, once. The MCP configuration tools and the CLI are thin faces
over these functions: they parse, call, and format; the rules live here.

Each operation validates everything before it writes, writes in one transaction, and returns
a JSON-ready dict. A refusal raises `ToolsetError` with its kind (not found, invalid, conflict,
unavailable) and a message that names the thing and what to do next, in no face's words.

A toolset records who made it (`by_person`): a person, or the model through the configuration
tools. The policy lets a person's toolset keep its own confirm modes and makes a mode follow its
tool into any other (policy/decide.py). What a model asks for may not drop a guard a person set:
it cannot delete or replace a toolset that holds confirm modes or hint pins.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import replace
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from toolkeeper.catalog import Catalog, CatalogTool
from toolkeeper.errors import ErrorKind, NextStep
from toolkeeper.services.costs import CostService, ListingCosts, summary
from toolkeeper.services.timestamps import iso
from toolkeeper.store import Store, overrides
from toolkeeper.store import policy as policy_rows
from toolkeeper.store import toolsets as rows
from toolkeeper.toolsets.model import (
    DESCRIPTION_MAX,
    MAX_TOOLS,
    Note,
    ToolNotes,
    ToolRef,
    Toolset,
    ToolsetError,
    ToolStatus,
    check_discovery,
    check_note,
    check_toolset_name,
    find_tool,
    resolve,
    status_of,
)

EXPORT_FORMAT = "toolkeeper.toolset/1"
NOT_STARTED = "Tool discovery not available: the gateway's servers have not connected yet. Try again shortly."
EXISTS = 'Toolset "{name}" already exists. Use a different name or delete the existing toolset first.'


class Change(StrEnum):
    EQUIPPED = "equipped"  # a toolset was equipped (the gateway returns to normal mode)
    UNEQUIPPED = "unequipped"
    CONTENT = "content"  # toolsets or notes changed; the listing may change
    POLICY = "policy"  # confirm modes or approval rules changed; the listing does not


class ToolsetService:
    def __init__(
        self,
        store: Store,
        catalog: Callable[[], Catalog | None],
        on_change: Callable[[Change], Awaitable[None]] | None = None,
        *,
        costs: CostService | None = None,
    ) -> None:
        self.store = store
        self._catalog = catalog
        self._on_change = on_change
        self._costs = costs or CostService()

    # -- reading ---------------------------------------------------------------------------

    def live_catalog(self) -> Catalog:
        catalog = self._catalog()
        if catalog is None:
            raise ToolsetError(NOT_STARTED, ErrorKind.UNAVAILABLE)
        return catalog

    async def available_tools(self, query: str = "") -> dict[str, Any]:
        """The catalog's tools by server; with `query`, only those it matches (`tool_matches`).
        Each tool's `tokens` are its definition's as clients get it now; `costs` has the totals."""
        catalog = self.live_catalog()
        costs = await self._costs.current()
        by_server: dict[str, list[CatalogTool]] = {}
        for tool in catalog.tools:
            if tool_matches(tool, query):
                by_server.setdefault(tool.server, []).append(tool)
        servers = []
        for server in sorted(by_server):
            tools = sorted(by_server[server], key=lambda t: t.name)
            servers.append(
                {
                    "serverName": server,
                    "available": tools[0].available,
                    "toolCount": len(tools),
                    "tools": [_tool_entry(t, costs) for t in tools],
                }
            )
        return {
            "summary": {
                "totalTools": len(catalog.tools),
                "totalServers": len(by_server),
                **(
                    {"query": query, "matchingTools": sum(len(t) for t in by_server.values())}
                    if query
                    else {}
                ),
            },
            **({"costs": summary(costs)} if costs is not None else {}),
            "toolsByServer": servers,
        }

    async def saved(self) -> dict[str, Any]:
        async with self.store.read() as conn:
            toolsets = await rows.load_all(conn)
            equipped = await rows.get_equipped(conn)
        catalog, costs = self._catalog(), await self._costs.current()
        return {
            "toolsets": [self.describe(t, equipped, catalog, costs) for t in toolsets],
            "equipped": equipped,
            **({"costs": summary(costs)} if costs is not None else {}),
        }

    async def names(self) -> list[str]:
        """The saved toolsets' names, without reading their tools."""
        async with self.store.read() as conn:
            return await rows.names(conn)

    async def show(self, name: str, *, with_version: bool = False) -> dict[str, Any]:
        """One toolset; `with_version` adds its `version`, which a form or a program sends back
        with a change so that a change made meanwhile is not overwritten."""
        check_toolset_name(name)
        async with self.store.read() as conn:
            toolset = await load_toolset(conn, name)
            equipped = await rows.get_equipped(conn)
        costs = await self._costs.current()
        info = self.describe(toolset, equipped, self._catalog(), costs)
        if costs is not None:
            info["costs"] = summary(costs)
        if with_version:
            info["version"] = version_of(toolset)
        return info

    async def notes(self, toolset: str | None = None) -> dict[str, Any]:
        """The notes of a toolset, tool by tool: the equipped one unless one is named."""
        target = await self._target_toolset(toolset)
        return {"toolset": target.name, "toolNotes": [_notes_json(entry) for entry in target.notes]}

    async def equipped(self) -> Toolset | None:
        async with self.store.read() as conn:
            name = await rows.get_equipped(conn)
            return await rows.load(conn, name) if name else None

    async def named(self, names: Iterable[str]) -> dict[str, Toolset]:
        """The toolsets of these names that exist, by name (a client key's scope names them)."""
        async with self.store.read() as conn:
            found = {name: await rows.load(conn, name) for name in set(names)}
        return {name: toolset for name, toolset in found.items() if toolset is not None}

    async def active(self) -> dict[str, Any]:
        async with self.store.read() as conn:
            name = await rows.get_equipped(conn)
            toolset = await rows.load(conn, name) if name else None
            known = await rows.names(conn)
        costs = await self._costs.current()
        totals = {"costs": summary(costs)} if costs is not None else {}
        if toolset is None:
            return {
                "equipped": False,
                "toolset": None,
                "message": "No toolset is equipped. "
                + (
                    f"Saved toolsets: {', '.join(known)}." if known else "None is saved yet: build one first."
                ),
                **totals,
            }
        info = self.describe(toolset, toolset.name, self._catalog(), costs)
        by_status: dict[str, list[str]] = {}
        for tool in info["tools"]:
            by_status.setdefault(tool.get("status", "unknown"), []).append(tool["namespacedName"])
        return {
            "equipped": True,
            "toolset": info,
            "exposedTools": [t["exposedName"] for t in info["tools"] if t.get("status") in ("ok", "changed")],
            "changedTools": by_status.get(ToolStatus.CHANGED, []),
            "unavailableTools": by_status.get(ToolStatus.UNAVAILABLE, []),
            **totals,
        }

    async def picking_costs(self, name: str | None = None) -> dict[str, Any] | None:
        """What each tool of the catalog would add to toolset `name` (None: a new one), by
        namespacedName (`tools`), and the totals (`costs`); None while the servers have not
        connected. The toolset's own tools count with its notes and pins."""
        toolset = None
        if name is not None:
            check_toolset_name(name)
            async with self.store.read() as conn:
                toolset = await load_toolset(conn, name)
        costs = await self._costs.current()
        if costs is None:
            return None
        return {"tools": costs.in_toolset(toolset), "costs": summary(costs)}

    def describe(
        self,
        toolset: Toolset,
        equipped: str | None,
        catalog: Catalog | None,
        costs: ListingCosts | None = None,
    ) -> dict[str, Any]:
        """A toolset for people and models; with a live catalog, each tool's status too; with
        `costs`, its `tokens` as it lists its tools, and each listed tool's."""
        tools = []
        counted = costs.under(toolset) if costs is not None else {}
        for ref in toolset.tools:
            entry: dict[str, Any] = {"namespacedName": ref.namespaced_name, "refId": ref.ref_id}
            if catalog is not None:
                tool, status = status_of(ref, catalog)
                entry["status"] = status.value
                if tool is not None:
                    entry.update(
                        namespacedName=tool.namespaced_name, server=tool.server, exposedName=tool.exposed_name
                    )
                    if status is ToolStatus.CHANGED:
                        entry["liveRefId"] = tool.ref_id
                    if tool.exposed_name in counted:
                        entry["tokens"] = counted[tool.exposed_name]
            tools.append(entry)
        return {
            "name": toolset.name,
            "description": toolset.description,
            "equipped": toolset.name == equipped,
            # A person's toolset keeps its own confirm modes; in the model's, modes follow their tool.
            "madeBy": "person" if toolset.made_by_person else "model",
            "discovery": toolset.discovery,
            "createdAt": iso(toolset.created_at),
            "updatedAt": iso(toolset.updated_at),
            "toolCount": len(toolset.tools),
            **({"tokens": sum(counted.values())} if costs is not None else {}),
            "tools": tools,
            "toolNotes": [_notes_json(entry) for entry in toolset.notes],
        }

    # -- writing ---------------------------------------------------------------------------

    async def build(
        self,
        name: Any,
        tools: Any,
        description: Any = "",
        auto_equip: bool = False,
        *,
        by_person: bool,
        discovery: Any = "off",
    ) -> dict[str, Any]:
        """Save a new toolset of `tools`; `discovery` "search" lists find-tools beside them."""
        check_toolset_name(name)
        description = check_description(description)
        discovery = check_discovery(discovery)
        catalog = self.live_catalog()
        refs, warnings = _picked_refs(tools, catalog)
        toolset = Toolset(
            name=name,
            description=description,
            tools=tuple(refs),
            made_by_person=by_person,
            discovery=discovery,
        )
        async with self.store.write() as conn:
            await _insert_new(conn, toolset, ToolsetError(EXISTS.format(name=name), ErrorKind.CONFLICT))
            if auto_equip:
                await rows.set_equipped(conn, name)
            saved = await load_toolset(conn, name)
        await self._changed(Change.EQUIPPED if auto_equip else Change.CONTENT)
        result: dict[str, Any] = {
            "success": True,
            "toolsetName": name,
            "autoEquipped": bool(auto_equip),
            "toolset": self.describe(saved, name if auto_equip else None, catalog),
        }
        if warnings:
            result["warnings"] = warnings
        return result

    async def add_tools(self, name: Any, tools: Any, *, by_person: bool) -> dict[str, Any]:
        """Add tools of the live catalog to an existing toolset, after the ones it holds; a tool
        it holds already stays where it is. Without a person, not to a toolset that holds confirm
        modes: its default mode would then hold for tools the person did not choose."""
        check_toolset_name(name)
        catalog = self.live_catalog()
        async with self.store.write() as conn:
            toolset = await load_toolset(conn, name)
            if not by_person and await policy_rows.count_modes_of(conn, name):
                raise ToolsetError(
                    f'Toolset "{name}" holds confirm modes, which would hold for the tools added; '
                    "adding tools to it needs a person.",
                    ErrorKind.CONFLICT,
                )
            picked, _ = _picked_refs(tools, catalog, kept=toolset.tools)
            added = [ref for ref in picked if ref not in toolset.tools]
            refs = toolset.tools + tuple(added)
            if len(refs) > MAX_TOOLS:
                raise ToolsetError(
                    f'Toolset "{name}" would hold {len(refs)} tools; a toolset holds at most {MAX_TOOLS}.'
                )
            if added:
                await rows.set_tools(conn, name, refs)
        if added:
            await self._changed(Change.CONTENT)
        return {
            "success": True,
            "toolsetName": name,
            "added": [ref.namespaced_name for ref in added],
            "alreadyIn": [ref.namespaced_name for ref in picked if ref not in added],
            "toolCount": len(refs),
        }

    async def replace(
        self,
        name: str,
        tools: Any,
        description: Any = "",
        *,
        by_person: bool,
        expected_version: str | None = None,
    ) -> dict[str, Any]:
        """Give a saved toolset these tools and this description (a person editing it).

        A tool it holds already keeps the identity it was stored with, so editing never accepts
        a changed schema behind the person's back (that is `repin`); a new one is resolved
        against the live servers, as in `build`. The notes of the tools it no longer holds go.
        With `expected_version`, only the toolset as it was at that version (see `show`);
        without a person, only a toolset that holds no confirm modes or pins.
        """
        check_toolset_name(name)
        description = check_description(description)
        catalog = self.live_catalog()
        async with self.store.write() as conn:
            toolset = await load_toolset(conn, name)
            if expected_version is not None:
                check_version(toolset, expected_version)
            if not by_person:
                await _refuse_dropping_guards(conn, name, "replacing")
            refs, warnings = _picked_refs(tools, catalog, kept=toolset.tools)
            await rows.set_tools(conn, name, tuple(refs))
            await rows.set_description(conn, name, description)
            await rows.keep_notes_of(conn, name, tuple(refs))
            saved = await load_toolset(conn, name)
            equipped = await rows.get_equipped(conn)
        await self._changed(Change.CONTENT)
        result: dict[str, Any] = {"success": True, "toolset": self.describe(saved, equipped, catalog)}
        if warnings:
            result["warnings"] = warnings
        return result

    async def set_discovery(self, name: str, discovery: Any) -> dict[str, Any]:
        """Turn tool search on ("search") or off for the clients that see a toolset. Tool search
        never runs a tool: it adds real tools to the caller's list, and each call of one is
        decided like any other, so it needs no person."""
        check_toolset_name(name)
        discovery = check_discovery(discovery)
        async with self.store.write() as conn:
            toolset = await load_toolset(conn, name)
            if toolset.discovery != discovery:
                await rows.set_discovery(conn, name, discovery)
        changed = toolset.discovery != discovery
        if changed:
            await self._changed(Change.CONTENT)
        state = "on: its clients also get find-tools" if discovery == "search" else "off"
        return {
            "success": True,
            "toolsetName": name,
            "discovery": discovery,
            "changed": changed,
            "message": f'Tool search for toolset "{name}" is {state}.'
            + ("" if changed else " Nothing changed."),
        }

    async def equip(self, name: str) -> dict[str, Any]:
        check_toolset_name(name)
        async with self.store.write() as conn:
            toolset = await load_toolset(conn, name)
            await rows.set_equipped(conn, name)
        await self._changed(Change.EQUIPPED)
        info = self.describe(toolset, name, self._catalog())
        result = {
            "success": True,
            "toolsetName": name,
            "message": f'Toolset "{name}" equipped. The tool list now shows its tools.',
            "toolset": info,
        }
        missing = [t["namespacedName"] for t in info["tools"] if t.get("status") == ToolStatus.UNAVAILABLE]
        if missing:
            result["warnings"] = [f"Not available now (server down or tool gone): {', '.join(missing)}."]
        return result

    async def unequip(self) -> dict[str, Any]:
        async with self.store.write() as conn:
            previous = await rows.get_equipped(conn)
            await rows.set_equipped(conn, None)
        if previous:
            await self._changed(Change.UNEQUIPPED)
        return {
            "success": True,
            "unequipped": previous,
            "message": f'Toolset "{previous}" unequipped.' if previous else "No toolset was equipped.",
        }

    async def delete(
        self, name: str, confirm: bool = False, *, by_person: bool, expected_version: str | None = None
    ) -> dict[str, Any]:
        """Delete a toolset with its notes, pins and confirm modes; only when the request confirms
        it, and without a person only when it holds no confirm modes or pins. With
        `expected_version`, only the toolset as it was at that version (see `show`)."""
        check_toolset_name(name)
        async with self.store.write() as conn:
            await require_toolset_id(conn, name)
            if expected_version is not None:
                check_version(await load_toolset(conn, name), expected_version)
            if not by_person:
                await _refuse_dropping_guards(conn, name, "deleting")
            if confirm is not True:
                raise ToolsetError(
                    f'Deleting toolset "{name}" removes it and its notes for good: confirm the deletion '
                    "to go ahead.",
                    ErrorKind.INVALID,
                    NextStep.CONFIRM,
                )
            was_equipped = await rows.get_equipped(conn) == name
            if was_equipped:
                await rows.set_equipped(conn, None)
            await rows.delete_toolset(conn, name)
            pins = await overrides.remove_scope(conn, name)
            await policy_rows.remove_modes_of(conn, name)
        await self._changed(Change.UNEQUIPPED if was_equipped else Change.CONTENT)
        message = f'Toolset "{name}" has been deleted.'
        if was_equipped:
            message += " It was equipped, so no toolset is equipped now."
        if pins:
            message += f" Its {pins} toolset-specific hint pin(s) went with it."
        return {"success": True, "deleted": name, "wasEquipped": was_equipped, "message": message}

    async def add_notes(self, tool_ref: Any, notes: Any, toolset: str | None = None) -> dict[str, Any]:
        ref = ToolRef.parse(tool_ref)
        if not isinstance(notes, list) or not notes:
            raise ToolsetError("Give at least one note: notes is a list of {name, note}.")
        checked = []
        for raw in notes:
            if not isinstance(raw, dict):
                raise ToolsetError("Each note must be an object with 'name' and 'note'.")
            checked.append(check_note(raw.get("name"), raw.get("note")))
        target = await self._target_toolset(toolset)
        tool_ref, server = self._member(ref, target)
        added: list[Note] = []
        warnings: list[str] = []
        async with self.store.write() as conn:
            toolset_id = await require_toolset_id(conn, target.name)
            for note in checked:
                if await rows.add_note(conn, toolset_id, tool_ref, note):
                    added.append(note)
                else:
                    warnings.append(f'Annotation "{note.name}" already exists for {tool_ref}; skipped.')
            if added:
                await rows.touch(conn, toolset_id)
        if added:
            await self._changed(Change.CONTENT)
        result: dict[str, Any] = {
            "toolset": target.name,
            "tool": {**tool_ref.as_json(), "server": server},
            "addedNotes": [{"name": n.name, "note": n.note} for n in added],
            "successCount": len(added),
            "skippedCount": len(warnings),
        }
        if warnings:
            result["warnings"] = warnings
        return result

    async def remove_notes(self, tool_ref: Any, names: Any, toolset: str | None = None) -> dict[str, Any]:
        ref = ToolRef.parse(tool_ref)
        if isinstance(names, str):
            names = [names]
        if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
            raise ToolsetError("Give the names of the notes to remove, e.g. ['usage-with-project'].")
        target = await self._target_toolset(toolset)
        tool_ref, _server = self._member(ref, target)
        existing = {n.name for entry in target.notes if entry.ref.key == tool_ref.key for n in entry.notes}
        unknown = [n for n in names if n not in existing]
        if unknown:
            have = ", ".join(sorted(existing)) or "none"
            raise ToolsetError(
                f"{tool_ref} has no note named {', '.join(repr(n) for n in unknown)} in toolset "
                f'"{target.name}" (its notes: {have}). Nothing was removed.',
                ErrorKind.NOT_FOUND,
            )
        async with self.store.write() as conn:
            toolset_id = await require_toolset_id(conn, target.name)
            removed = [n for n in names if await rows.remove_note(conn, toolset_id, tool_ref, n)]
            await rows.touch(conn, toolset_id)
        await self._changed(Change.CONTENT)
        return {"toolset": target.name, "tool": tool_ref.as_json(), "removedNotes": removed}

    async def repin(self, name: str, *, expected_version: str | None = None) -> dict[str, Any]:
        """Accept the live schema of every changed tool: store its current refId. With
        `expected_version`, only the toolset as it was at that version (see `show`)."""
        check_toolset_name(name)
        catalog = self.live_catalog()
        async with self.store.write() as conn:
            toolset = await load_toolset(conn, name)
            if expected_version is not None:
                check_version(toolset, expected_version)
            refs, repinned, unavailable = [], [], []
            for ref in toolset.tools:
                tool, status = status_of(ref, catalog)
                if tool is not None and (
                    status is ToolStatus.CHANGED or (tool.available and ref.ref_id is None)
                ):
                    refs.append(ToolRef(tool.namespaced_name, tool.ref_id))
                    repinned.append(tool.namespaced_name)
                    if ref.ref_id:
                        await rows.repin_notes(conn, name, ref.ref_id, tool.ref_id)
                else:
                    refs.append(ref)
                    if status is ToolStatus.UNAVAILABLE:
                        unavailable.append(str(ref))
            if repinned:
                await rows.set_tools(conn, name, tuple(refs))
        if repinned:
            await self._changed(Change.CONTENT)
        result: dict[str, Any] = {"toolset": name, "repinned": repinned}
        if unavailable:
            result["warnings"] = [f"Not available now, left as they were: {', '.join(unavailable)}."]
        return result

    # -- export and import -----------------------------------------------------------------

    async def export(self, name: str) -> dict[str, Any]:
        check_toolset_name(name)
        async with self.store.read() as conn:
            toolset = await load_toolset(conn, name)
        return {
            "format": EXPORT_FORMAT,
            "name": toolset.name,
            "description": toolset.description,
            "createdAt": iso(toolset.created_at),
            "lastModified": iso(toolset.updated_at),
            "tools": [ref.as_json() for ref in toolset.tools],
            "toolNotes": [_notes_json(entry) for entry in toolset.notes],
            "discovery": toolset.discovery,
        }

    async def import_toolset(
        self, document: Any, name: str | None = None, overwrite: bool = False, *, by_person: bool
    ) -> dict[str, Any]:
        """Import an exported toolset (a hypertool ToolsetConfig has the same shape).

        An existing toolset of the same name is replaced only when `overwrite` asks for it, and
        without a person only when it holds no confirm modes or pins. The toolset is the
        importer's: a person's, or the model's.
        """
        if name is not None:  # an empty name must not fall back to the document's
            check_toolset_name(name)
        toolset = replace(parse_toolset_document(document, name), made_by_person=by_person)
        catalog = self._catalog()
        if catalog is not None:  # fill in the identity the document left out, where the tool is live
            toolset = replace(toolset, tools=tuple(_complete(ref, catalog) for ref in toolset.tools))
        async with self.store.write() as conn:
            replaced = False
            if overwrite and await rows.load(conn, toolset.name) is not None:
                if not by_person:
                    await _refuse_dropping_guards(conn, toolset.name, "replacing")
                # The equipped state is kept by name, so an equipped toolset stays equipped.
                await rows.delete_toolset(conn, toolset.name)
                replaced = True
            taken = ToolsetError(
                f'Toolset "{toolset.name}" already exists. Import it under another name, or with '
                "overwrite to replace it.",
                ErrorKind.CONFLICT,
                NextStep.OVERWRITE,
            )
            await _insert_new(conn, toolset, taken)
            is_equipped = await rows.get_equipped(conn) == toolset.name
        await self._changed(Change.CONTENT)
        return {
            "success": True,
            "toolsetName": toolset.name,
            "replaced": replaced,
            "toolCount": len(toolset.tools),
            "noteCount": sum(len(e.notes) for e in toolset.notes),
            "equipped": is_equipped,
        }

    async def import_hypertool(
        self, path: Path, overwrite: bool = False, *, by_person: bool
    ) -> dict[str, Any]:
        """Toolsets and notes from hypertool's `config.json`; its last equipped toolset too.

        hypertool's refIds hash other fields than ours, so they are dropped and references
        keep their namespacedName (re-pinned on first use); a reference with only a refId
        cannot be carried over and is reported.
        """
        document = read_json_file(path)
        stored = document.get("toolsets") if isinstance(document, dict) else None
        if not isinstance(stored, dict):
            raise ToolsetError(
                f'{path}: not a hypertool config.json (no "toolsets" object). It usually lives at '
                "~/.toolprint/hypertool-mcp/config.json."
            )
        imported: list[Toolset] = []
        # Each skipped toolset says why and what kind of refusal it was, so a face can add its
        # own next step (the CLI's --overwrite) to the conflicts.
        skipped: list[dict[str, str]] = []
        warnings: list[str] = []
        for key, raw in stored.items():
            try:
                toolset, dropped = _from_hypertool(key, raw)
            except ToolsetError as exc:
                skipped.append({"name": str(key), "reason": str(exc), "kind": exc.kind})
                continue
            warnings += [f"{toolset.name}: {d}" for d in dropped]
            imported.append(replace(toolset, made_by_person=by_person))
        last = document.get("lastEquippedToolset")
        equip = None
        async with self.store.write() as conn:
            existing = set(await rows.names(conn))
            written = []
            for toolset in imported:
                if toolset.name in existing:
                    if overwrite and not by_person:
                        await _refuse_dropping_guards(conn, toolset.name, "replacing")
                    if not overwrite:
                        skipped.append(
                            {
                                "name": toolset.name,
                                "reason": "a toolset of that name exists; import with overwrite to "
                                "replace it",
                                "kind": ErrorKind.CONFLICT,
                            }
                        )
                        continue
                    await rows.delete_toolset(conn, toolset.name)
                await _insert_new(
                    conn, toolset, ToolsetError(EXISTS.format(name=toolset.name), ErrorKind.CONFLICT)
                )
                written.append(toolset.name)
            if last in written and await rows.get_equipped(conn) is None:
                await rows.set_equipped(conn, last)
                equip = last
        if written:
            await self._changed(Change.EQUIPPED if equip else Change.CONTENT)
        return {"imported": written, "skipped": skipped, "warnings": warnings, "equipped": equip}

    # -- helpers ---------------------------------------------------------------------------

    async def _target_toolset(self, name: str | None) -> Toolset:
        """The toolset a note operation changes: the one named, else the equipped one."""
        if name is not None:
            check_toolset_name(name)
        async with self.store.read() as conn:
            if name is None:
                name = await rows.get_equipped(conn)
                if name is None:
                    known = await rows.names(conn)
                    if known:
                        raise ToolsetError(
                            "No toolset is currently equipped: equip one, or name the toolset to change. "
                            f"Available toolsets: {', '.join(known)}.",
                            ErrorKind.NOT_FOUND,
                            NextStep.EQUIP_TOOLSET,
                        )
                    raise ToolsetError(
                        "No toolset is currently equipped, and none is saved yet: build one first.",
                        ErrorKind.NOT_FOUND,
                        NextStep.BUILD_TOOLSET,
                    )
            return await load_toolset(conn, name)

    def _member(self, ref: ToolRef, toolset: Toolset) -> tuple[ToolRef, str | None]:
        """The toolset's own reference to the tool `ref` names, and its server.

        A live tool is resolved as when a toolset is built; a tool whose server is away can still be
        named by the identity the toolset stored, so its notes stay manageable.
        """
        catalog = self._catalog()
        try:
            tool = resolve(ref, catalog) if catalog is not None else None
        except ToolsetError:
            tool = None
        if tool is not None:
            if not toolset.contains(tool):
                raise ToolsetError(
                    f'Tool "{tool.namespaced_name}" is not in the current toolset "{toolset.name}".',
                    ErrorKind.NOT_FOUND,
                )
            return ToolRef(tool.namespaced_name, tool.ref_id), tool.server
        for stored in toolset.tools:
            if (ref.namespaced_name and ref.namespaced_name == stored.namespaced_name) or (
                ref.ref_id and ref.ref_id == stored.ref_id
            ):
                return stored, stored.namespaced_name.split(".", 1)[0] if stored.namespaced_name else None
        if catalog is None:  # offline (the CLI): only the toolset's stored identities can match
            raise ToolsetError(f'Tool "{ref}" is not in the toolset "{toolset.name}".', ErrorKind.NOT_FOUND)
        raise ToolsetError(
            f'Tool not found: {ref}. Neither a connected server nor the toolset "{toolset.name}" has it.',
            ErrorKind.NOT_FOUND,
            NextStep.LIST_TOOLS,
        )

    async def _changed(self, change: Change) -> None:
        if self._on_change is not None:
            await self._on_change(change)


# -- the store's lookups, with the kind of refusal they are -------------------------------------
# The store's own row functions raise kind-less errors; these are the ones the services use.


async def _unknown_toolset(conn: AsyncConnection, name: str) -> ToolsetError:
    known = await rows.names(conn)
    return ToolsetError(
        f'Toolset "{name}" not found. Available toolsets: {", ".join(known) if known else "none"}.',
        ErrorKind.NOT_FOUND,
    )


async def load_toolset(conn: AsyncConnection, name: str) -> Toolset:
    toolset = await rows.load(conn, name)
    if toolset is None:
        raise await _unknown_toolset(conn, name)
    return toolset


async def require_toolset_id(conn: AsyncConnection, name: str) -> int:
    if name not in await rows.names(conn):
        raise await _unknown_toolset(conn, name)
    return await rows.require_id(conn, name)


async def _refuse_dropping_guards(conn: AsyncConnection, name: str, doing: str) -> None:
    """Deleting or replacing a toolset drops its confirm modes and pins (how a person wants its
    tools confirmed and seen): that needs a person."""
    modes = await policy_rows.count_modes_of(conn, name)
    pins = await overrides.count_scope(conn, name)
    if modes or pins:
        held = " and ".join(
            f"{count} {what}" for count, what in ((modes, "confirm mode(s)"), (pins, "hint pin(s)")) if count
        )
        raise ToolsetError(
            f'Toolset "{name}" holds {held}; {doing} it would drop them, and that needs a person. '
            "Build a toolset under another name instead.",
            ErrorKind.CONFLICT,
        )


async def _insert_new(conn: AsyncConnection, toolset: Toolset, taken: ToolsetError) -> None:
    """Insert a toolset whose name must be free; `taken` is the refusal when it is not."""
    if toolset.name in await rows.names(conn):
        raise taken
    try:
        await rows.insert_toolset(conn, toolset)
    except ToolsetError:  # another writer took the name between the check and the insert
        raise taken from None


def _picked_refs(
    tools: Any, catalog: Catalog, kept: tuple[ToolRef, ...] = ()
) -> tuple[list[ToolRef], list[str]]:
    """The references to store for the tools a person picked, and warnings: each resolved
    against the live catalog, except one a toolset holds already (in `kept`), which stays as it
    was stored. Refused as a whole when any cannot be resolved."""
    if not isinstance(tools, list) or not tools:
        raise ToolsetError("Toolset must include at least one tool")
    if len(tools) > MAX_TOOLS:
        raise ToolsetError(f"A toolset holds at most {MAX_TOOLS} tools; split this one.")
    refs: list[ToolRef] = []
    problems: list[str] = []
    warnings: list[str] = []
    for i, raw in enumerate(tools):
        try:
            asked = ToolRef.parse(raw)
            ref = _stored_match(asked, kept) or _live_ref(asked, catalog)
        except ToolsetError as exc:
            problems.append(f"tools[{i}]: {exc}")
            continue
        if ref in refs:
            warnings.append(f"{ref} was listed twice; it is included once.")
        else:
            refs.append(ref)
    if problems:
        raise ToolsetError("Invalid tool references:\n" + "\n".join(problems))
    return refs, warnings


def _stored_match(asked: ToolRef, stored: tuple[ToolRef, ...]) -> ToolRef | None:
    for ref in stored:
        if (asked.namespaced_name and asked.namespaced_name == ref.namespaced_name) or (
            asked.ref_id and asked.ref_id == ref.ref_id
        ):
            return ref
    return None


def _live_ref(asked: ToolRef, catalog: Catalog) -> ToolRef:
    tool = resolve(asked, catalog)
    return ToolRef(tool.namespaced_name, tool.ref_id)


def tool_matches(tool: CatalogTool, query: str) -> bool:
    """Whether every word of `query` is in the tool's names, title or description (any case)."""
    words = query.lower().split()
    if not words:
        return True
    declared = tool.declared
    title = declared.get("title") or (declared.get("annotations") or {}).get("title") or ""
    text = " ".join(
        str(part)
        for part in (tool.namespaced_name, tool.exposed_name, title, declared.get("description") or "")
    ).lower()
    return all(word in text for word in words)


def version_of(toolset: Toolset) -> str:
    """A digest of what a toolset holds (description, tools, notes, maker, tool search), short
    enough for a form's hidden field: any change to it gives another."""
    content = {
        "description": toolset.description,
        "tools": [ref.as_json() for ref in toolset.tools],
        "notes": [_notes_json(entry) for entry in toolset.notes],
        "byPerson": toolset.made_by_person,
        "discovery": toolset.discovery,
    }
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:16]


def check_version(toolset: Toolset, expected: str) -> None:
    """Refuse a change asked for against an older state of the toolset (a stale form)."""
    if expected != version_of(toolset):
        raise ToolsetError(
            f'Toolset "{toolset.name}" changed since it was shown to you: look at it again, and '
            "repeat the change if it still holds. Nothing was changed.",
            ErrorKind.CONFLICT,
        )


def status_counts(info: dict[str, Any]) -> dict[str, int]:
    """How many of a described toolset's tools are ok, changed and unavailable (no status is
    known without a live catalog)."""
    counts = Counter(tool.get("status") for tool in info["tools"])
    return {status.value: counts.get(status.value, 0) for status in ToolStatus}


def _tool_entry(tool: CatalogTool, costs: ListingCosts | None) -> dict[str, Any]:
    declared = tool.declared
    entry: dict[str, Any] = {
        "name": tool.name,
        "namespacedName": tool.namespaced_name,
        "exposedName": tool.exposed_name,
        "serverName": tool.server,
        "refId": tool.ref_id,
    }
    title = declared.get("title") or (declared.get("annotations") or {}).get("title")
    if title:
        entry["title"] = title
    if declared.get("description"):
        entry["description"] = declared["description"]
    if tool.problem is not None:  # a toolset may hold it, but no client is sent it until fixed
        entry["leftOut"] = tool.problem
    if costs is not None:
        entry["tokens"] = costs.of_tool(tool)
    return entry


def _notes_json(entry: ToolNotes) -> dict[str, Any]:
    return {"toolRef": entry.ref.as_json(), "notes": [{"name": n.name, "note": n.note} for n in entry.notes]}


def _complete(ref: ToolRef, catalog: Catalog) -> ToolRef:
    tool = find_tool(ref, catalog)
    if tool is None:
        return ref
    return ToolRef(ref.namespaced_name or tool.namespaced_name, ref.ref_id or tool.ref_id)


def check_description(description: Any) -> str:
    if description is None:
        return ""
    if not isinstance(description, str):
        raise ToolsetError("The toolset description must be text.")
    if len(description) > DESCRIPTION_MAX:
        raise ToolsetError(
            f"The toolset description is {len(description)} characters; the limit is {DESCRIPTION_MAX}."
        )
    return description


def read_json_file(path: Path) -> Any:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ToolsetError(f"{path}: no such file.", ErrorKind.NOT_FOUND) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ToolsetError(f"{path}: cannot read it ({exc}).") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ToolsetError(f"{path}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg}.") from None


def _parse_notes(raw: Any) -> tuple[ToolNotes, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ToolsetError("toolNotes must be a list of {toolRef, notes}.")
    entries = []
    for i, entry in enumerate(raw):
        at = f"toolNotes[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("notes"), list):
            raise ToolsetError(f"{at} must be an object with toolRef and a notes list.")
        try:
            ref = ToolRef.parse(entry.get("toolRef"))
            notes = tuple(
                check_note(n.get("name"), n.get("note")) if isinstance(n, dict) else check_note(None, None)
                for n in entry["notes"]
            )
        except ToolsetError as exc:
            raise ToolsetError(f"{at}: {exc}") from None
        entries.append(ToolNotes(ref, notes))
    return tuple(entries)


def parse_toolset_document(document: Any, name: str | None = None) -> Toolset:
    """A toolset from its JSON form, checked field by field; errors name the field."""
    if not isinstance(document, dict):
        raise ToolsetError("The toolset document must be a JSON object with name and tools.")
    fmt = document.get("format")
    if fmt is not None and fmt != EXPORT_FORMAT:
        raise ToolsetError(f"format {fmt!r} is not one this version reads ({EXPORT_FORMAT}).")
    given = name or document.get("name")
    try:
        name = check_toolset_name(given)
    except ToolsetError as exc:
        raise ToolsetError(f"name {given!r}: {exc}") from None
    tools = document.get("tools")
    if not isinstance(tools, list) or not tools:
        raise ToolsetError("Toolset must include at least one tool")
    refs: list[ToolRef] = []
    for i, raw in enumerate(tools):
        try:
            ref = ToolRef.parse(raw)
        except ToolsetError as exc:
            raise ToolsetError(f"tools[{i}]: {exc}") from None
        if ref not in refs:
            refs.append(ref)
    return Toolset(
        name=name,
        description=check_description(document.get("description")),
        tools=tuple(refs),
        notes=_parse_notes(document.get("toolNotes")),
        created_at=_parse_time(document.get("createdAt")),
        discovery=check_discovery(document.get("discovery", "off")),
    )


def _parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else None


def _strip_foreign_ids(refs: Iterable[ToolRef], what: str, dropped: list[str]) -> list[ToolRef]:
    kept = []
    for ref in refs:
        if ref.namespaced_name:
            kept.append(ToolRef(ref.namespaced_name, None))
        else:
            dropped.append(
                f"{what} given only by hypertool refId {ref.ref_id} cannot be carried over; skipped."
            )
    return kept


def _from_hypertool(key: str, raw: Any) -> tuple[Toolset, list[str]]:
    if not isinstance(raw, dict):
        raise ToolsetError("not an object")
    toolset = parse_toolset_document({**raw, "name": raw.get("name") or key, "format": None})
    dropped: list[str] = []
    tools = _strip_foreign_ids(toolset.tools, "a tool", dropped)
    if not tools:
        raise ToolsetError("none of its tools has a namespacedName")
    notes = []
    for entry in toolset.notes:
        kept = _strip_foreign_ids([entry.ref], "notes for a tool", dropped)
        if kept:
            notes.append(ToolNotes(kept[0], entry.notes))
    return replace(toolset, tools=tuple(dict.fromkeys(tools)), notes=tuple(notes)), dropped

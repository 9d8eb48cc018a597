"""Toolsets, notes and the equipped toolset in the store. Callers own the transaction."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, overload

from sqlalchemy import Table, delete, func, insert, not_, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from toolkeeper.config.model import Discovery
from toolkeeper.store.gateway_mode import write_mode
from toolkeeper.store.gateway_values import put_value, read_value
from toolkeeper.store.tables import tool_notes, toolset_tools, toolsets
from toolkeeper.toolsets.model import Note, ToolNotes, ToolRef, Toolset, ToolsetError, check_discovery

EQUIPPED = "equipped_toolset"


def now() -> datetime:
    return datetime.now(UTC)


def conflict_insert(conn: AsyncConnection, table: Table) -> Any:
    """An INSERT that can say ON CONFLICT (SQLite and PostgreSQL both can, with their own syntax)."""
    # Imported here, where the connection's engine has loaded its dialect already: a SQLite
    # store never loads the PostgreSQL dialect.
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as postgresql_insert

        return postgresql_insert(table)
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    return sqlite_insert(table)


@overload
def aware(value: datetime) -> datetime: ...
@overload
def aware(value: None) -> None: ...
def aware(value: datetime | None) -> datetime | None:
    """A stored time with its zone: SQLite hands back naive datetimes; everything stored is UTC."""
    return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value


async def names(conn: AsyncConnection) -> list[str]:
    return list((await conn.execute(select(toolsets.c.name).order_by(toolsets.c.name))).scalars())


async def _id_of(conn: AsyncConnection, name: str) -> int | None:
    return (await conn.execute(select(toolsets.c.id).where(toolsets.c.name == name))).scalar_one_or_none()


async def _not_found(conn: AsyncConnection, name: str) -> ToolsetError:
    known = await names(conn)
    return ToolsetError(
        f'Toolset "{name}" not found. Available toolsets: {", ".join(known) if known else "none"}'
    )


async def require_id(conn: AsyncConnection, name: str) -> int:
    toolset_id = await _id_of(conn, name)
    if toolset_id is None:
        raise await _not_found(conn, name)
    return toolset_id


async def load(conn: AsyncConnection, name: str) -> Toolset | None:
    row = (await conn.execute(select(toolsets).where(toolsets.c.name == name))).one_or_none()
    if row is None:
        return None
    refs = await conn.execute(
        select(toolset_tools.c.namespaced_name, toolset_tools.c.ref_id)
        .where(toolset_tools.c.toolset_id == row.id)
        .order_by(toolset_tools.c.position)
    )
    notes = await conn.execute(
        select(
            tool_notes.c.tool_key,
            tool_notes.c.namespaced_name,
            tool_notes.c.ref_id,
            tool_notes.c.name,
            tool_notes.c.note,
        )
        .where(tool_notes.c.toolset_id == row.id)
        .order_by(tool_notes.c.id)
    )
    grouped: dict[str, tuple[ToolRef, list[Note]]] = {}
    for key, ns, ref, note_name, text in notes:
        grouped.setdefault(key, (ToolRef(ns, ref), []))[1].append(Note(note_name, text))
    return Toolset(
        name=row.name,
        description=row.description,
        tools=tuple(ToolRef(ns, ref) for ns, ref in refs),
        notes=tuple(ToolNotes(ref, tuple(n)) for ref, n in grouped.values()),
        created_at=aware(row.created_at),
        updated_at=aware(row.updated_at),
        made_by_person=bool(row.made_by_person),
        discovery=check_discovery(row.discovery),
    )


async def load_required(conn: AsyncConnection, name: str) -> Toolset:
    toolset = await load(conn, name)
    if toolset is None:
        raise await _not_found(conn, name)
    return toolset


async def makers_and_members(conn: AsyncConnection) -> dict[str, tuple[bool, tuple[ToolRef, ...]]]:
    """Every toolset by name: whether a person made it, and its tools (without notes)."""
    rows = await conn.execute(
        select(
            toolsets.c.name,
            toolsets.c.made_by_person,
            toolset_tools.c.namespaced_name,
            toolset_tools.c.ref_id,
        )
        .select_from(toolsets.outerjoin(toolset_tools, toolset_tools.c.toolset_id == toolsets.c.id))
        .order_by(toolsets.c.name, toolset_tools.c.position)
    )
    found: dict[str, tuple[bool, list[ToolRef]]] = {}
    for name, by_person, namespaced_name, ref_id in rows:
        entry = found.setdefault(name, (bool(by_person), []))
        if namespaced_name is not None or ref_id is not None:
            entry[1].append(ToolRef(namespaced_name, ref_id))
    return {name: (by_person, tuple(refs)) for name, (by_person, refs) in found.items()}


async def load_all(conn: AsyncConnection) -> list[Toolset]:
    return [toolset for name in await names(conn) if (toolset := await load(conn, name))]


def _exists(name: str) -> str:
    return f'Toolset "{name}" already exists. Use a different name or delete the existing toolset first.'


async def insert_toolset(conn: AsyncConnection, toolset: Toolset) -> None:
    if await _id_of(conn, toolset.name) is not None:
        raise ToolsetError(_exists(toolset.name))
    created = toolset.created_at or now()
    try:
        result = await conn.execute(
            insert(toolsets)
            .values(
                name=toolset.name,
                description=toolset.description,
                created_at=created,
                updated_at=toolset.updated_at or created,
                made_by_person=toolset.made_by_person,
                discovery=toolset.discovery,
            )
            .returning(toolsets.c.id)
        )
    except IntegrityError:  # another writer created it between our check and our insert
        raise ToolsetError(_exists(toolset.name)) from None
    toolset_id = result.scalar_one()
    await _write_tools(conn, toolset_id, toolset.tools)
    for entry in toolset.notes:
        for note in entry.notes:
            await add_note(conn, toolset_id, entry.ref, note)


async def _write_tools(conn: AsyncConnection, toolset_id: int, refs: tuple[ToolRef, ...]) -> None:
    await conn.execute(delete(toolset_tools).where(toolset_tools.c.toolset_id == toolset_id))
    if refs:
        await conn.execute(
            insert(toolset_tools),
            [
                {
                    "toolset_id": toolset_id,
                    "position": i,
                    "namespaced_name": r.namespaced_name,
                    "ref_id": r.ref_id,
                }
                for i, r in enumerate(refs)
            ],
        )


async def set_tools(conn: AsyncConnection, name: str, refs: tuple[ToolRef, ...]) -> None:
    toolset_id = await require_id(conn, name)
    await _write_tools(conn, toolset_id, refs)
    await touch(conn, toolset_id)


async def set_description(conn: AsyncConnection, name: str, description: str) -> None:
    toolset_id = await require_id(conn, name)
    await conn.execute(update(toolsets).where(toolsets.c.id == toolset_id).values(description=description))
    await touch(conn, toolset_id)


async def set_discovery(conn: AsyncConnection, name: str, discovery: Discovery) -> None:
    toolset_id = await require_id(conn, name)
    await conn.execute(update(toolsets).where(toolsets.c.id == toolset_id).values(discovery=discovery))
    await touch(conn, toolset_id)


async def keep_notes_of(conn: AsyncConnection, name: str, refs: tuple[ToolRef, ...]) -> int:
    """Remove the notes of tools `refs` does not name (by namespacedName or refId, as notes
    match their tool); how many went."""
    toolset_id = await require_id(conn, name)
    names = [r.namespaced_name for r in refs if r.namespaced_name]
    ref_ids = [r.ref_id for r in refs if r.ref_id]
    kept = or_(tool_notes.c.namespaced_name.in_(names), tool_notes.c.ref_id.in_(ref_ids))
    gone = await conn.execute(
        delete(tool_notes).where(tool_notes.c.toolset_id == toolset_id, not_(func.coalesce(kept, False)))
    )
    return gone.rowcount


async def repin_notes(conn: AsyncConnection, name: str, old_ref_id: str, new_ref_id: str) -> None:
    toolset_id = await require_id(conn, name)
    await conn.execute(
        update(tool_notes)
        .where(tool_notes.c.toolset_id == toolset_id, tool_notes.c.ref_id == old_ref_id)
        .values(ref_id=new_ref_id)
    )


async def delete_toolset(conn: AsyncConnection, name: str) -> None:
    toolset_id = await require_id(conn, name)
    # Children first: not every SQLite connection enforces ON DELETE CASCADE.
    await conn.execute(delete(tool_notes).where(tool_notes.c.toolset_id == toolset_id))
    await conn.execute(delete(toolset_tools).where(toolset_tools.c.toolset_id == toolset_id))
    await conn.execute(delete(toolsets).where(toolsets.c.id == toolset_id))


async def touch(conn: AsyncConnection, toolset_id: int) -> None:
    await conn.execute(update(toolsets).where(toolsets.c.id == toolset_id).values(updated_at=now()))


async def add_note(conn: AsyncConnection, toolset_id: int, ref: ToolRef, note: Note) -> bool:
    """Add one note; False (nothing written) when the tool already has a note of that name.

    ON CONFLICT DO NOTHING rather than check-then-insert: two clients adding the same name at
    the same moment get one note and one "already exists", never an error or a duplicate.
    """
    values = {
        "toolset_id": toolset_id,
        "tool_key": ref.key,
        "namespaced_name": ref.namespaced_name,
        "ref_id": ref.ref_id,
        "name": note.name,
        "note": note.note,
        "created_at": now(),
    }
    statement = (
        conflict_insert(conn, tool_notes)
        .values(**values)
        .on_conflict_do_nothing(index_elements=["toolset_id", "tool_key", "name"])
    )
    return (await conn.execute(statement)).rowcount == 1


async def remove_note(conn: AsyncConnection, toolset_id: int, ref: ToolRef, name: str) -> bool:
    result = await conn.execute(
        delete(tool_notes).where(
            tool_notes.c.toolset_id == toolset_id, tool_notes.c.tool_key == ref.key, tool_notes.c.name == name
        )
    )
    return result.rowcount > 0


async def get_equipped(conn: AsyncConnection) -> str | None:
    return await read_value(conn, EQUIPPED)


async def set_equipped(conn: AsyncConnection, name: str | None) -> None:
    await put_value(conn, EQUIPPED, name)
    if name is not None:  # seed 001's auto-exit, for the replicas that share their mode
        await write_mode(conn, None)

"""Sign-ins begun by `toolkeeper login` whose browser comes back to a running gateway's
`/oauth/callback`: the command keeps the sign-in (its PKCE verifier never leaves its memory) and
leaves word here that it expects the answer for its `state`; the gateway's callback, not knowing
that state, hands the answer over here, and the command takes it and completes the sign-in.

Rows live in `gateway_state`, keyed by a digest of the state, and are taken once. A code here is
of no use without the verifier, and expires with the sign-in."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from toolkeeper.store.gateway_values import put_value, read_value

PREFIX = "signin_handoff:"


def _key(state: str) -> str:
    return PREFIX + hashlib.sha256(state.encode()).hexdigest()


async def expect_answer(conn: AsyncConnection, state: str, until: float) -> None:
    await put_value(conn, _key(state), json.dumps({"until": until}))


async def hand_over(conn: AsyncConnection, state: str, answer: dict[str, str | None], now: float) -> bool:
    """Leave the browser's `answer` for the command that expects it; False when none does (the
    state is foreign, used, or its sign-in expired)."""
    row = await _row(conn, state)
    if row is None or "answer" in row or row.get("until", 0) < now:
        return False
    await put_value(conn, _key(state), json.dumps({**row, "answer": answer}))
    return True


async def take_answer(conn: AsyncConnection, state: str) -> dict[str, str | None] | None:
    """The answer handed over for `state`, once (the row goes); None while there is none."""
    row = await _row(conn, state)
    if row is None or "answer" not in row:
        return None
    await forget(conn, state)
    answer: dict[str, str | None] = row["answer"]
    return answer


async def forget(conn: AsyncConnection, state: str) -> None:
    await put_value(conn, _key(state), None)


async def _row(conn: AsyncConnection, state: str) -> dict[str, Any] | None:
    value = await read_value(conn, _key(state))
    if value is None:
        return None
    found = json.loads(value)
    return found if isinstance(found, dict) else None

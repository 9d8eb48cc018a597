"""A moment as every face shows it: ISO 8601 in UTC, with `Z`. A module of its own so that the
services that only show moments (keys, policy) do not import the toolsets' catalog with it."""

from __future__ import annotations

from datetime import datetime


def iso(value: datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value else None

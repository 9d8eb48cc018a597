"""A message the next page shows once (a sign-in's outcome after the browser's round trip): kept
here and named in the address by a random id, so no link can make the dashboard say anything."""

from __future__ import annotations

import secrets
from collections import OrderedDict
from dataclasses import dataclass

# Messages nobody came to read are dropped, oldest first, past this many.
KEPT = 64


@dataclass(frozen=True)
class Flash:
    message: str
    ok: bool


class Flashes:
    def __init__(self) -> None:
        self._waiting: OrderedDict[str, Flash] = OrderedDict()

    def put(self, message: str, *, ok: bool) -> str:
        """Keep `message` for one showing; the id to put in the address that shows it."""
        key = secrets.token_urlsafe(12)
        self._waiting[key] = Flash(message, ok)
        while len(self._waiting) > KEPT:
            self._waiting.popitem(last=False)
        return key

    def take(self, key: str | None) -> Flash | None:
        return self._waiting.pop(key, None) if key else None

"""The CLI's tables. Their cells hold text from clients (their names), servers (tool names,
titles, errors) and tokens (a subject): control characters in it would act on the person's
terminal (clear it, recolour it, move the cursor) and bidirectional overrides would reorder what
it shows. Every cell is made visible here, once, whichever command prints the table.
"""

from __future__ import annotations

import re
from typing import Any

from rich.table import Table

# C0 controls but tab and newline (a cell may hold lines of its own), DEL and C1 controls, and
# the characters that change the direction text is shown in.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def visible(text: str) -> str:
    """`text` with each character that would act on the terminal written as its escape."""
    return _UNSAFE.sub(lambda match: f"\\u{ord(match.group()):04x}", text)


class SafeTable(Table):
    def add_row(self, *renderables: Any, **options: Any) -> None:
        super().add_row(
            *(visible(cell) if isinstance(cell, str) else cell for cell in renderables), **options
        )

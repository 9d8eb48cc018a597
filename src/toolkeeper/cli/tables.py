"""The CLI's tables. Their cells hold text from clients (their names), servers (tool names,
titles, errors) and tokens (a subject): every str cell, and a str title or caption, is made
visible (display.py) and shown as plain text, never parsed as markup, whichever command prints
the table. A cell with colours is `Text` built by `common.styled`, which makes each piece
visible the same way.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from toolkeeper.display import visible


def _plain(value: Any, style: str) -> Any:
    return Text(visible(value), style=style) if isinstance(value, str) else value


class SafeTable(Table):
    def __init__(self, *headers: Any, **options: Any) -> None:
        # A Text title or caption keeps no style of the table's: give it the default one.
        for name in ("title", "caption"):
            if name in options:
                options[name] = _plain(options[name], f"table.{name}")
        super().__init__(*headers, **options)

    def add_row(self, *renderables: Any, **options: Any) -> None:
        super().add_row(*(_plain(cell, "") for cell in renderables), **options)

"""The dashboard's static files as the package ships them."""

from __future__ import annotations

import re
from pathlib import Path

import toolkeeper.faces.web as web

STATIC = Path(web.__file__).parent / "static"


def test_every_rule_block_of_the_stylesheet_is_closed() -> None:
    # An unclosed @media block silently moves every later rule under its condition: the
    # page then looks right at 400 px and unstyled at 1280.
    text = re.sub(r"/\*.*?\*/", "", (STATIC / "style.css").read_text(), flags=re.S)
    depth = 0
    for number, line in enumerate(text.splitlines(), 1):
        depth += line.count("{") - line.count("}")
        assert depth >= 0, f"style.css:{number} closes a block that is not open"
    assert depth == 0, "style.css leaves a block open"

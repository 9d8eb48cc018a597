"""What a tool's definition costs the model: an estimate of its tokens, as the client receives it.

The count is of the `tools/list` entry exactly as sent (name, title, description with the
toolset's notes, schemas, annotations), serialized compactly, under one named encoding whose
tables ship inside the tokenizer's package: nothing is downloaded, ever. Models differ in their
tokenizers, so every figure shown is labelled an estimate and names `ENCODING`.

Loading the tables takes about half a second and holds the interpreter, so a long-lived process
loads them once at start (`load`, in a worker thread, while its servers start) and counts when a
view is built; counts are remembered per distinct entry, so a rebuild counts only what changed.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from toolkeeper import jsonwire

if TYPE_CHECKING:
    from quicktok import Tokenizer

ENCODING = "o200k_base"
ESTIMATE = f"estimated tokens ({ENCODING})"
# Distinct entries remembered; a catalog of 20,000 tools fits, and a rebuild reuses them.
_REMEMBERED = 50_000

_lock = threading.Lock()
_encoder: Tokenizer | None = None
_counted: dict[bytes, int] = {}


def load() -> Tokenizer:
    """The encoder, loaded on first use (safe from any thread)."""
    global _encoder
    if _encoder is None:
        with _lock:
            if _encoder is None:
                import quicktok

                _encoder = quicktok.get_encoding(ENCODING)
    return _encoder


def loaded() -> bool:
    """Whether the tables are in memory: counting then never waits for them."""
    return _encoder is not None


def count_text(text: str) -> int:
    return int(load().count(text))


def tokens_of(entry: Mapping[str, Any]) -> int:
    """The estimated tokens of one `tools/list` entry as a client receives it."""
    wire = jsonwire.dumps(entry)
    known = _counted.get(wire)
    if known is None:
        known = int(load().count(wire.decode("utf-8", "replace")))
        if len(_counted) >= _REMEMBERED:
            _counted.clear()
        _counted[wire] = known
    return known


def total_of(entries: Iterable[Mapping[str, Any]]) -> int:
    return sum(tokens_of(entry) for entry in entries)


def short(tokens: int) -> str:
    """`~840 tokens`, `~3.1k tokens`, `~1.2M tokens`: a figure a person reads at a glance."""
    if tokens < 1000:
        figure = str(tokens)
    elif tokens < 1_000_000:
        figure = f"{tokens / 1000:.1f}".removesuffix(".0") + "k"
    else:
        figure = f"{tokens / 1_000_000:.1f}".removesuffix(".0") + "M"
    return f"~{figure} tokens"

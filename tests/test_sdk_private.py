"""The SDK's private attributes toolkeeper uses (src/toolkeeper/sdk_private.py) still exist: an
SDK upgrade that moves one fails here, by name, instead of somewhere in a call path."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

from toolkeeper.sdk_private import PRIVATE_ATTRIBUTES

SRC = Path(__file__).resolve().parent.parent / "src" / "toolkeeper"


@pytest.mark.parametrize(("owner", "attribute"), PRIVATE_ATTRIBUTES)
def test_the_sdk_still_has_it(owner: str, attribute: str) -> None:
    module_name, _, class_name = owner.rpartition(".")
    cls = getattr(importlib.import_module(module_name), class_name)
    # Instance attributes are set in __init__: look for the assignment in the class's source.
    source = inspect.getsource(cls)
    assert hasattr(cls, attribute) or f"self.{attribute}" in source, (
        f"mcp changed: {owner}.{attribute} is gone; update toolkeeper/sdk_private.py"
    )


def test_no_other_module_reaches_into_the_sdk() -> None:
    """Private SDK attributes and modules are used only in sdk_private.py."""
    offenders = []
    for path in SRC.rglob("*.py"):
        if path.name == "sdk_private.py":
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.module.startswith("mcp")
                and any(part.startswith("_") for part in node.module.split("."))
            ):
                offenders.append(f"{path.relative_to(SRC)}: from {node.module}")
            if isinstance(node, ast.Attribute) and node.attr in {a for _, a in PRIVATE_ATTRIBUTES}:
                offenders.append(f"{path.relative_to(SRC)}:{node.lineno}: .{node.attr}")
    assert offenders == []

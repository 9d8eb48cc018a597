"""A source tree's bytecode, written before anything is timed.

A gateway installed from a wheel starts from bytecode that pip compiled; a tree run from its
`src/` does so only if its `__pycache__` is current. Where `PYTHONDONTWRITEBYTECODE` is set (as on
some machines and in some containers) no start ever writes it, so every start would compile each
module it imports again, a few hundred milliseconds of a start that a person never pays, and more
for a tree just unpacked than for one already used. `compileall` writes it whatever that variable
says."""

from __future__ import annotations

import subprocess
from pathlib import Path


def compile_tree(src: Path, python: str) -> None:
    """Compile every module of `src` for `python`, quietly; a module that does not compile is left
    for the run to report."""
    subprocess.run([python, "-m", "compileall", "-q", str(src)], check=False, stdout=subprocess.DEVNULL)

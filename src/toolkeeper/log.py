"""Logging setup. Everything goes to stderr: in stdio mode stdout is the protocol stream."""

from __future__ import annotations

import logging
import sys

_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"


def setup_logging(level: str = "INFO") -> None:
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(_FORMAT, datefmt="%H:%M:%S"))
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    numeric = logging.getLevelName(level.upper())
    logging.getLogger("toolkeeper").setLevel(numeric if isinstance(numeric, int) else logging.INFO)

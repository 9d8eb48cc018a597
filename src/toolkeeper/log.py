"""Logging setup. Everything goes to stderr: in stdio mode stdout is the protocol stream.

Every line is written without the configuration's secrets, whoever wrote it: toolkeeper, a
library, or a server's stderr passed on (which may quote the expanded command that failed)."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import TextIO

_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"


def _shown_as_is(text: str) -> str:
    return text


# What every log line goes through before it is written; set once the configuration is loaded.
_redact: Callable[[str], str] = _shown_as_is


def hide_in_logs(redact: Callable[[str], str]) -> None:
    """From now on, every log line (its message, traceback and stack) passes through `redact`."""
    global _redact
    _redact = redact


class RedactSecrets(logging.Filter):
    """On a handler: the record it writes carries no secret. The record is rewritten rather than
    the output so that every handler after this one gets it clean too. Costs nothing for a call
    that logs nothing."""

    def filter(self, record: logging.LogRecord) -> bool:
        redact = _redact
        if redact is _shown_as_is:
            return True
        message = record.getMessage()
        redacted = redact(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        if record.exc_info and not record.exc_text:
            record.exc_text = _TRACEBACKS.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


_TRACEBACKS = logging.Formatter()
_REDACT_SECRETS = RedactSecrets()


def redact_every_handler() -> None:
    """Put the filter on every handler of every logger, also those a library set up itself
    (uvicorn configures its own)."""
    loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    for logger in loggers:
        if not isinstance(logger, logging.Logger):
            continue  # a placeholder for a logger not created yet has no handlers
        for handler in logger.handlers:
            if _REDACT_SECRETS not in handler.filters:
                handler.addFilter(_REDACT_SECRETS)


class CurrentStderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever `sys.stderr` is when a line is written, not when the handler was made:
    a status line on the terminal (the CLI's) stands in for stderr while it shows, and prints each
    line above itself rather than through it."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _: TextIO) -> None:
        pass  # always the current stderr


def setup_logging(level: str = "INFO") -> None:
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handler = CurrentStderr()
    handler.setFormatter(logging.Formatter(_FORMAT, datefmt="%H:%M:%S"))
    handler.addFilter(_REDACT_SECRETS)
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    numeric = logging.getLevelName(level.upper())
    logging.getLogger("toolkeeper").setLevel(numeric if isinstance(numeric, int) else logging.INFO)

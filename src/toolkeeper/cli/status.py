"""How loud a command is: what the command line asked of the output (-v, --json) and the log
level that follows. `serve` keeps the configured log and prints nothing to a terminal."""

from __future__ import annotations

import os
from dataclasses import dataclass

from toolkeeper.config.loader import SETTINGS

# The environment variables that name the log level (the configuration's `logLevel` setting).
LOG_LEVEL_VARIABLES = next(setting.env for setting in SETTINGS if setting.field == "log_level")
_MORE_VERBOSE_FIRST = ("DEBUG", "INFO")


@dataclass
class CommandLine:
    """What the command line asked of the output: how many times -v was given (set by the app's
    callback) and whether the answer is JSON (set by the --json option as it is read)."""

    verbose: int = 0
    json: bool = False

    def note_json(self, value: bool) -> bool:
        self.json = value
        return value


COMMAND_LINE = CommandLine()


def command_log_level(configured: str | None) -> str:
    """The log level of a command other than `serve`, `configured` being the configuration's
    (None before it is read). In order: -vv shows DEBUG; -v shows INFO, or the configured level
    if that says more; a level the environment names for this run is kept; otherwise WARNING,
    so that the answer is not preceded by the servers' start-up log."""
    if COMMAND_LINE.verbose >= 2:
        return "DEBUG"
    if COMMAND_LINE.verbose == 1:
        return "DEBUG" if (configured or "").upper() == "DEBUG" else "INFO"
    named = next((os.environ[name] for name in LOG_LEVEL_VARIABLES if os.environ.get(name)), None)
    if named is not None:
        # The environment wins over the file when the configuration is read, so `configured`
        # (when known) is this value already checked.
        return configured or named
    return "WARNING"

"""The error every service operation raises for bad input or a missing thing."""

from __future__ import annotations


class ServiceError(Exception):
    """What a person asked for cannot be done: the message says what and what to do next.

    The faces show it as it is: an `isError` result for an MCP configuration tool, a one-line
    message and exit code 1 for the CLI. Nothing has been written when it is raised.
    """

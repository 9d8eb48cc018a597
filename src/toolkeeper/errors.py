"""The error every service operation raises, and what kind of refusal it is.

A service says what went wrong and what to do next in words that name the thing (a toolset, a
tool, a note, the store), never a face's spelling of it (a CLI flag, an MCP tool name). Each
face turns the kind into its own form: an exit code for the CLI, an `isError` result for an
MCP configuration tool, an HTTP status for a web face; and may append its own spelling of the
next step.
"""

from __future__ import annotations

from enum import StrEnum


class ErrorKind(StrEnum):
    NOT_FOUND = "not_found"  # the toolset, tool, note or rule named does not exist
    INVALID = "invalid"  # the input is malformed or breaks a rule
    CONFLICT = "conflict"  # the input clashes with what is stored (a name taken)
    UNAVAILABLE = "unavailable"  # the servers the operation needs are not connected (yet)
    STORE = "store"  # the store cannot be read or written (read-only, locked, unreachable)


class NextStep(StrEnum):
    """A step a face can spell in its own terms after the service's message."""

    CONFIRM = "confirm"  # repeat the request, confirmed
    OVERWRITE = "overwrite"  # repeat the request, asking to replace what exists
    RAISE_LIMIT = "raise-limit"  # repeat the request with a larger size limit
    EQUIP_TOOLSET = "equip-toolset"  # equip a toolset, or name one
    BUILD_TOOLSET = "build-toolset"  # no toolset is saved: build one
    LIST_TOOLS = "list-tools"  # see which tools the servers offer
    FORCE = "force"  # repeat the request, writing a file its owner made read-only


class ServiceError(Exception):
    """What a person asked for cannot be done: the message says what and what to do next.

    Nothing has been written when it is raised. A subclass may set its own default `kind`.
    """

    kind: ErrorKind = ErrorKind.INVALID

    def __init__(
        self, message: str, kind: ErrorKind | None = None, next_step: NextStep | None = None
    ) -> None:
        super().__init__(message)
        if kind is not None:
            self.kind = kind
        self.next_step = next_step


HTTP_STATUS: dict[ErrorKind, int] = {
    ErrorKind.NOT_FOUND: 404,
    ErrorKind.INVALID: 422,
    ErrorKind.CONFLICT: 409,
    ErrorKind.UNAVAILABLE: 503,
    ErrorKind.STORE: 503,
}


def http_status(kind: ErrorKind) -> int:
    """The HTTP status a web face answers a refusal of this kind with."""
    return HTTP_STATUS[kind]


def refusal_of(subject: object, error: ServiceError) -> dict[str, str]:
    """One thing's refusal within a request about many (a bulk action on tools): which, what
    kind, why."""
    return {"tool": str(subject), "kind": error.kind.value, "message": str(error)}

"""A handshake-era server's call for a 2026-07-28 client, kept running between the client's
rounds: what the server asks during it goes back to the client as an `InputRequiredResult`, and
the client's retry carries the answers to the waiting server."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from pydantic import TypeAdapter, ValidationError

from toolkeeper.downstreams.base import ServerInput
from toolkeeper.protocol import INVALID_PARAMS

# How long a downstream call waits for a modern client to come back with its answers.
EXCHANGE_TIMEOUT = 600.0

# How a client's answer to each kind of server request is read.
RESULT_TYPES: dict[str, TypeAdapter[types.InputResponse]] = {
    "sampling/createMessage": TypeAdapter(types.CreateMessageResult | types.CreateMessageResultWithTools),
    "elicitation/create": TypeAdapter(types.ElicitResult),
    "roots/list": TypeAdapter(types.ListRootsResult),
}


@dataclass(eq=False)
class Exchange:
    """A downstream call of a modern client to a legacy server that stays running while the
    client answers the server's requests in rounds of `InputRequiredResult` and retry."""

    session: str  # the client's session: only its retries carry the call on
    digest: str  # the call (server, tool, arguments) its retries must repeat
    id: str = field(default_factory=lambda: secrets.token_urlsafe(12))
    questions: list[tuple[str, ServerInput, anyio.Event, list[Any]]] = field(default_factory=list)
    asked: anyio.Event = field(default_factory=anyio.Event)
    done: anyio.Event = field(default_factory=anyio.Event)
    result: dict[str, Any] | None = None
    error: BaseException | None = None
    capabilities: types.ClientCapabilities | None = None
    # The client's request now waiting for this call (its stream carries the call's log messages).
    waiting: ServerRequestContext[Any] | None = None
    # Cancelled when the client gives up on a round: the downstream call is cancelled with it.
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)

    async def ask(self, request: ServerInput) -> types.InputResponse | types.ErrorData:
        answered = anyio.Event()
        slot: list[types.InputResponse | types.ErrorData] = []
        key = f"r{len(self.questions) + 1}-{secrets.token_hex(3)}"
        self.questions.append((key, request, answered, slot))
        self.asked.set()
        with anyio.fail_after(EXCHANGE_TIMEOUT):
            await answered.wait()
        return slot[0]

    def pending(self) -> dict[str, Any]:
        return {
            key: request.model_dump(by_alias=True, mode="json", exclude_none=True)
            for key, request, answered, _ in self.questions
            if not answered.is_set()
        }

    def pending_methods(self) -> set[str]:
        return {request.method for _, request, answered, _ in self.questions if not answered.is_set()}

    def answer(self, responses: dict[str, Any]) -> None:
        for key, request, answered, slot in self.questions:
            if answered.is_set():
                continue
            try:
                slot.append(RESULT_TYPES[request.method].validate_python(responses[key]))
            except KeyError:
                slot.append(
                    types.ErrorData(
                        code=INVALID_PARAMS, message=f"the client did not answer {request.method}"
                    )
                )
            except ValidationError as exc:
                message = f"the client's answer to {request.method} is not valid: {exc.errors()[0]['msg']}"
                slot.append(types.ErrorData(code=INVALID_PARAMS, message=message))
            answered.set()
        self.questions = [q for q in self.questions if not q[2].is_set()]
        self.asked = anyio.Event()

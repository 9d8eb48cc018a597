"""A list request's large answer as one JSON response, not an event stream.

The SDK's streamable-HTTP app answers every request of a session with an event stream, and
common clients cap one event's size (the SDK's own client at 1 MiB): a `tools/list` of a large
REST API, or one tool with a huge description, would then never reach them. A list request
never makes the server ask its client anything mid-way, so when the client accepts JSON its
answer is collected here, and one larger than `LARGE_ANSWER_BYTES` is sent as one
`application/json` response with the SDK's status and headers. A smaller answer, and one that is
not exactly one message (a notification came first, or the stream ended with none), is sent on as
the stream the SDK made, unchanged: streams are what clients of the handshake era expect most
(the MCP conformance suite counts them), and a small one fits every client.
"""

from __future__ import annotations

from typing import Any

from starlette.types import Message, Send

# Requests whose answer is one message and that never wait on the client.
LIST_METHODS = frozenset({"tools/list", "resources/list", "resources/templates/list", "prompts/list"})
# Well under the 1 MiB the SDK's own client takes in one event.
LARGE_ANSWER_BYTES = 256 * 1024
_DROPPED_HEADERS = frozenset({b"content-type", b"content-length", b"transfer-encoding", b"cache-control"})


def wants_one_json_answer(message: Any, accepts_json: bool) -> bool:
    return (
        accepts_json
        and isinstance(message, dict)
        and message.get("method") in LIST_METHODS
        and "id" in message
    )


class OneJsonAnswer:
    """An ASGI `send` that turns an event stream of one message into one JSON response."""

    def __init__(self, send: Send) -> None:
        self.send = send
        self.start: Message | None = None
        self.chunks: list[bytes] = []

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            if _content_type(message).startswith(b"text/event-stream"):
                self.start = message
                return
        elif message["type"] == "http.response.body" and self.start is not None:
            self.chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                await self._finish()
            return
        await self.send(message)

    async def _finish(self) -> None:
        assert self.start is not None
        stream = b"".join(self.chunks)
        # Most answers are small: no event's data is longer than the stream that holds it.
        answers = _event_data(stream) if len(stream) > LARGE_ANSWER_BYTES else []
        if len(answers) != 1 or len(answers[0]) <= LARGE_ANSWER_BYTES:
            await self.send(self.start)
            await self.send({"type": "http.response.body", "body": stream})
            return
        body = answers[0]
        headers = [(k, v) for k, v in self.start.get("headers", []) if k.lower() not in _DROPPED_HEADERS]
        headers += [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await self.send({"type": "http.response.start", "status": self.start["status"], "headers": headers})
        await self.send({"type": "http.response.body", "body": body})


def _content_type(start: Message) -> bytes:
    for key, value in start.get("headers", []):
        if key.lower() == b"content-type":
            return bytes(value).lower()
    return b""


def _event_data(stream: bytes) -> list[bytes]:
    """The data of each event in an event stream that has any (comments, pings and a priming
    event with empty data have none)."""
    found: list[bytes] = []
    for event in stream.replace(b"\r\n", b"\n").split(b"\n\n"):
        data = [line[5:].removeprefix(b" ") for line in event.split(b"\n") if line.startswith(b"data:")]
        if data and any(data):
            found.append(b"\n".join(data))
    return found

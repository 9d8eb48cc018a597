"""What a caller whose own account is not signed in gets from a call: at once, the server and how
to sign in, with an address of the gateway's that begins their sign-in (signin/links.py) where the
gateway serves its dashboard.

A client that declared URL-mode elicitation (`capabilities.elicitation.url`) is sent that address
as an elicitation, in its era's form:
- handshake era (2025-11-25): the `-32042` URL-elicitation-required error, and
  `notifications/elicitation/complete` once the account has signed in;
- 2026-07-28: an `InputRequiredResult` whose `elicitation/create` request is in URL mode; the
  client's retry carries the answer (read by nobody: the retry is the call again, which goes
  through once the account has signed in, and otherwise gets the plain error, never a second
  elicitation, so a person who declined is not asked again and again).
Any other client gets the plain error.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from mcp.server.session import ServerSession
from mcp.shared.exceptions import UrlElicitationRequiredError

from toolkeeper.downstreams.signin.auth import sign_in_needed
from toolkeeper.downstreams.signin.keeper import SignIns
from toolkeeper.downstreams.signin.links import SignInLinks
from toolkeeper.downstreams.signin.tokens import SHARED_ACCOUNT, SignInNeeded
from toolkeeper.pipeline.call import ToolCall
from toolkeeper.protocol import error_result

logger = logging.getLogger(__name__)

# The inputRequests key of the gateway's own sign-in elicitation to a 2026-07-28 client.
SIGN_IN_KEY = "toolkeeper.sign-in"
# At most this many handshake-era elicitations wait for their account's sign-in at once.
MAX_WAITING = 1000


@dataclass(frozen=True)
class _Waiting:
    server: str
    account: str
    session: ServerSession


class SignInPrompts:
    def __init__(self, sign_ins: SignIns, links: SignInLinks | None = None) -> None:
        self.links = links if links is not None else SignInLinks()
        # elicitationId → the session told to sign in, until that account signs in.
        self._waiting: dict[str, _Waiting] = {}
        self._sending: set[asyncio.Task[None]] = set()
        sign_ins.subscribe(self._account_changed)
        self._sign_ins = sign_ins

    def answer(
        self, call: ToolCall, exposed_name: str, needed: SignInNeeded, *, retried: bool = False
    ) -> dict[str, Any]:
        """The call's answer: the plain error, or the URL-mode elicitation of the address
        (raised as `UrlElicitationRequiredError` for a handshake-era client). `retried`: the call
        is a modern client's retry that answered the elicitation already."""
        address = needed.address or self._address(needed.server, needed.account)
        told = sign_in_needed(needed.server, needed.account, address)
        if address is None or retried or not declares_url_elicitation(call):
            return error_result(f"{exposed_name}: {told}")
        message = f"{exposed_name}: {told}"
        if call.modern:
            params = {"mode": "url", "message": message, "url": address}
            return {
                "resultType": "input_required",
                "inputRequests": {SIGN_IN_KEY: {"method": "elicitation/create", "params": params}},
            }
        elicitation_id = secrets.token_urlsafe(16)
        if call.ctx is not None:
            self._wait(elicitation_id, _Waiting(needed.server, needed.account, call.ctx.session))
        raise UrlElicitationRequiredError(
            [types.ElicitRequestURLParams(message=message, url=address, elicitation_id=elicitation_id)],
            message,
        )

    def told(self, server: str, account: str) -> str:
        """What `account` is told to sign in to `server`: its command, and a new link where one
        can be made."""
        return str(sign_in_needed(server, account, self._address(server, account)))

    def _address(self, server: str, account: str) -> str | None:
        # The gateway's shared account is signed in by whoever runs the gateway, never by a link.
        return None if account == SHARED_ACCOUNT else self.links.address(server, account)

    def _wait(self, elicitation_id: str, waiting: _Waiting) -> None:
        while len(self._waiting) >= MAX_WAITING:
            del self._waiting[next(iter(self._waiting))]
        self._waiting[elicitation_id] = waiting

    def _account_changed(self, server: str, account: str) -> None:
        if self._sign_ins.current(server, account) is None:
            return
        done = [
            (key, waiting)
            for key, waiting in self._waiting.items()
            if (waiting.server, waiting.account) == (server, account)
        ]
        for key, waiting in done:
            del self._waiting[key]
            task = asyncio.get_running_loop().create_task(_tell_complete(waiting.session, key))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)


async def _tell_complete(session: ServerSession, elicitation_id: str) -> None:
    try:
        await session.send_elicit_complete(elicitation_id)
    except Exception as exc:  # the client left meanwhile: nothing to tell
        logger.debug("could not tell a client its sign-in is done: %s", type(exc).__name__)


def declares_url_elicitation(call: ToolCall) -> bool:
    capabilities = call.capabilities
    if capabilities is None and call.ctx is not None:
        declared = call.ctx.session.client_capabilities
        capabilities = declared.model_dump(by_alias=True, exclude_none=True) if declared else {}
    elicitation = (capabilities or {}).get("elicitation")
    return isinstance(elicitation, dict) and elicitation.get("url") is not None


def answers_sign_in(params: dict[str, Any]) -> bool:
    """Whether a modern client's retry answers the gateway's sign-in elicitation."""
    responses = params.get("inputResponses")
    return isinstance(responses, dict) and SIGN_IN_KEY in responses


def without_sign_in_answer(params: dict[str, Any]) -> dict[str, Any]:
    """The call's parameters as the downstream is to see them: the answer to the gateway's own
    elicitation is the gateway's, not the server's."""
    if not answers_sign_in(params):
        return params
    responses = {k: v for k, v in params["inputResponses"].items() if k != SIGN_IN_KEY}
    rest = {k: v for k, v in params.items() if k != "inputResponses"}
    return {**rest, "inputResponses": responses} if responses else rest

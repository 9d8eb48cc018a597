"""A downstream's tool as a pipeline target: the catalog tool, bound to the downstream that
serves it and the relay that carries what that downstream sends back during a call."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from toolkeeper.catalog import CatalogTool
from toolkeeper.config.model import ServerConfig
from toolkeeper.downstreams.base import CallTimedOut, Downstream, Era, Unavailable
from toolkeeper.downstreams.signin.keeper import SignIns
from toolkeeper.downstreams.signin.tokens import SHARED_ACCOUNT, SignInNeeded, calling_account
from toolkeeper.pipeline.call import RemoteAccount, ToolCall
from toolkeeper.pipeline.signin_prompts import SignInPrompts, answers_sign_in, without_sign_in_answer
from toolkeeper.protocol import CAPABILITY_FOR_REQUEST, check_input_requests, declares, error_result
from toolkeeper.relay.relay import Relay

# Where a call keeps the remote account it is made with (`ToolCall.extra`), so that its record
# made before it runs and the one made after it ended name the same.
REMOTE_ACCOUNT = "remote_account"


@dataclass(frozen=True, slots=True)
class DownstreamTool:
    """Made when the view is rebuilt, one per routed catalog tool, so a call finds its
    downstream with the same dict lookup that finds the tool."""

    tool: CatalogTool
    downstream: Downstream
    relay: Relay
    toolset: str | None = None  # the toolset it is listed under
    # What a caller whose account needs a sign-in is told (None: the plain error, no address).
    sign_in: SignInPrompts | None = None
    # Whether each principal calls with an account of their own (`"signIn": "perPrincipal"`).
    per_principal: bool = field(init=False)
    # Where the downstream signs in (a remote MCP server): its entry and the gateway's accounts.
    signs_in: tuple[ServerConfig, SignIns] | None = field(init=False)

    def __post_init__(self) -> None:
        config = getattr(self.downstream, "config", None)
        sign_in = getattr(config, "sign_in", None)
        object.__setattr__(self, "per_principal", sign_in is not None and sign_in.mode == "perPrincipal")
        sign_ins = getattr(self.downstream, "sign_ins", None)
        signs_in = (
            (config, sign_ins)
            if isinstance(config, ServerConfig) and sign_in is not None and isinstance(sign_ins, SignIns)
            else None
        )
        object.__setattr__(self, "signs_in", signs_in)

    @property
    def exposed_name(self) -> str:
        return self.tool.exposed_name

    def needs_client(self, call: ToolCall) -> bool:
        # A downstream that may ask during the call (a handshake-era server) asks a client that
        # declared sampling, elicitation or roots; the others ask nothing, or ask in the result.
        # This also keeps a modern client that declared roots off the fast lane for a server that
        # takes roots: the relay asks it for them first (a handshake-era server, here too).
        if not self.downstream.may_ask_client:
            return False
        capabilities = call.capabilities
        if not capabilities:  # declares nothing: the common case, spared the three lookups
            return False
        return any(declares(capabilities, method) for method in CAPABILITY_FOR_REQUEST)

    def remote_account(self, call: ToolCall) -> RemoteAccount | None:
        # Memory only (a dict lookup), never the store: this is on every call's path.
        known: RemoteAccount | None = call.extra.get(REMOTE_ACCOUNT)
        if known is not None or self.signs_in is None:
            return known
        config, sign_ins = self.signs_in
        account = call.client.principal.identity if self.per_principal else SHARED_ACCOUNT
        signed_in = sign_ins.current(config.name, account)
        if signed_in is None and not sign_ins.needs_sign_in(config, account):
            return None  # the server took requests without a token: no account was used
        named: RemoteAccount = {"account": account, "subject": signed_in.subject if signed_in else None}
        call.extra[REMOTE_ACCOUNT] = named
        return named

    async def forward(self, call: ToolCall) -> dict[str, Any]:
        self.remote_account(call)
        if not self.per_principal:
            return await self._forward(call)
        retried = answers_sign_in(call.params)
        call.params = without_sign_in_answer(call.params)
        account = calling_account.set(call.client.principal.identity)
        try:
            return await self._forward(call)
        except SignInNeeded as needed:
            if self.sign_in is None:
                return error_result(f"{self.tool.exposed_name}: {needed}")
            return self.sign_in.answer(call, self.tool.exposed_name, needed, retried=retried)
        finally:
            calling_account.reset(account)

    async def _forward(self, call: ToolCall) -> dict[str, Any]:
        name, downstream = self.tool.name, self.downstream
        try:
            if call.ctx is not None:
                return await self.relay.call(call.ctx, downstream, name, call.params, call.client.session)
            if downstream.era is Era.LEGACY:
                result = await self.relay.plain_call(
                    downstream, name, call.params.get("arguments"), call.params.get("_meta")
                )
            else:
                result = await downstream.call_tool(
                    name, call.params.get("arguments"), meta=call.params.get("_meta")
                )
        except (Unavailable, CallTimedOut) as exc:
            if isinstance(exc, SignInNeeded) and self.per_principal:
                raise  # `forward` answers with the caller's own way to sign in
            if isinstance(exc, CallTimedOut):
                call.extra["timed_out"] = True  # the audit log tells a timeout from a tool's error
            return error_result(f"{self.tool.exposed_name}: {exc}")
        if result.get("resultType") == "input_required":
            # Only modern clients take this path, and they answer a modern server themselves.
            check_input_requests(result, call.capabilities or {})
        return result

"""The call pipeline: every `tools/call`, the configuration tools' included, passes these stages.

    find → resolve (only when a later stage needs the hints) → decide → forward → record

A stage is a small object with one method, `run(call)`. It returns None to let the call go on,
or a result to end it there (a refusal, say, or the forwarded call's result); it may raise
`MCPError` for a protocol error. Stages marked `after_result` (record) run after the call has
ended, however it ended, and see its result or error.

Whatever a stage needs per tool is computed when the view is rebuilt (see `Gateway.view`),
never per call; the hot path is a dict lookup and the downstream call. Either face may drive
the pipeline: the SDK's request handler (with its request context, for calls that may talk
back to the client) and the stdio fast lane (without one, for calls that cannot).
docs/architecture.md describes the flow.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import anyio
from mcp.shared.exceptions import MCPError

from toolkeeper.annotations.resolve import Resolution, ResolveError
from toolkeeper.catalog import CatalogTool
from toolkeeper.downstreams.base import CallTimedOut, Unavailable
from toolkeeper.gateway.config_tools import ConfigHost, ConfigTool, error_result
from toolkeeper.policy.model import DecisionRecord
from toolkeeper.protocol import (
    CAPABILITY_FOR_REQUEST,
    INVALID_PARAMS,
    check_input_requests,
    declares,
)

if TYPE_CHECKING:
    from mcp.server.context import ServerRequestContext

    from toolkeeper.downstreams.base import Downstream
    from toolkeeper.gateway.relay import Relay

Target = CatalogTool | ConfigTool


class PipelineHost(ConfigHost, Protocol):
    """What the stages use of the running gateway."""

    @property
    def relay(self) -> Relay: ...

    def lookup(self, exposed_name: str) -> Target | None:
        """The target of a name in the current view."""
        ...

    def why_hidden(self, name: str) -> str:
        """For a name the view does not route: which mode, if any, lists it."""
        ...

    def downstream_of(self, tool: CatalogTool) -> Downstream: ...

    async def resolve(self, tool: CatalogTool, arguments: Any) -> Resolution: ...


@dataclass(frozen=True, slots=True)
class ClientIdentity:
    """Who made a call: the client's own name and version, and the connection or session it
    came on (a stdio connection, an HTTP session id), which scopes "for this session" answers."""

    name: str | None
    version: str | None
    session: str

    def label(self) -> str:
        who = (
            f"{self.name} {self.version}" if self.name and self.version else self.name or "an unnamed client"
        )
        return f"{who} ({self.session})"


UNKNOWN_CLIENT = ClientIdentity(None, None, "unknown")


@dataclass(slots=True, eq=False)
class ToolCall:
    """One `tools/call` on its way through the pipeline."""

    name: str  # the exposed name the client called
    params: dict[str, Any]  # the request's params as the client sent them (wire form)
    modern: bool  # whether the client speaks the 2026-07-28 era
    # The SDK's request context, when the SDK's handler drives the call: the relay needs it
    # for a call during which the server may talk back to this client (progress, questions).
    ctx: ServerRequestContext[Any, Any] | None = None
    # The client's declared capabilities in wire form, when the fast lane drives the call.
    capabilities: dict[str, Any] | None = None
    client: ClientIdentity = UNKNOWN_CLIENT
    target: Target | None = None
    resolution: Resolution | None = None
    decision: DecisionRecord | None = None  # set by the decide stage
    result: dict[str, Any] | None = None
    error: BaseException | None = None
    started: float = field(default_factory=time.monotonic)
    extra: dict[str, Any] = field(default_factory=dict)  # what stages leave for later stages

    @property
    def arguments(self) -> dict[str, Any]:
        arguments = self.params.get("arguments")
        return arguments if isinstance(arguments, dict) else {}


class Stage(Protocol):
    # Record stages: run after the call ended, with `call.result` or `call.error` set.
    after_result: ClassVar[bool]
    # Whether this stage reads `call.resolution` (then the resolve stage runs before it).
    needs_hints: ClassVar[bool]

    async def run(self, call: ToolCall) -> dict[str, Any] | None: ...


class Pipeline:
    def __init__(self, stages: Sequence[Stage]) -> None:
        self.stages = tuple(stages)

    def with_stage(self, stage: Stage, *, before: type[Any] | None = None) -> Pipeline:
        """A pipeline with `stage` added before the first stage of type `before` (default: at
        the end). The approval gate and the audit log plug in this way."""
        stages = list(self.stages)
        index = next((i for i, s in enumerate(stages) if before and isinstance(s, before)), len(stages))
        if stage.needs_hints and not any(isinstance(s, Resolve) for s in stages[:index]):
            raise ValueError(
                f"{type(stage).__name__} reads the resolved hints, but no resolve stage comes before it: "
                "build the pipeline with standard_pipeline(decide=...)"
            )
        stages.insert(index, stage)
        return Pipeline(stages)

    async def run(self, call: ToolCall) -> dict[str, Any]:
        try:
            for stage in self.stages:
                if call.result is None:
                    result = await stage.run(call)
                    if result is not None:
                        call.result = result
                elif stage.after_result:
                    await stage.run(call)
        except BaseException as exc:
            call.error = exc
            # Shielded: a call its client cancelled is recorded all the same.
            with anyio.CancelScope(shield=True):
                for stage in self.stages:
                    if stage.after_result:
                        await stage.run(call)
            raise
        if call.result is None:
            raise RuntimeError(f"no stage answered the call of {call.name!r}")
        return call.result


class _StageDefaults:
    after_result: ClassVar[bool] = False
    needs_hints: ClassVar[bool] = False


class Find(_StageDefaults):
    """The tool the name stands for in the current view, or an error that says which mode, if
    any, lists it."""

    def __init__(self, gateway: PipelineHost) -> None:
        self.gateway = gateway

    async def run(self, call: ToolCall) -> dict[str, Any] | None:
        target = self.gateway.lookup(call.name)
        if target is None:
            raise MCPError(code=INVALID_PARAMS, message=self.gateway.why_hidden(call.name))
        call.target = target
        return None


class Resolve(_StageDefaults):
    """The hints that hold for these arguments (downstream resolution, rules, static hints).
    Only in a pipeline whose later stages read them."""

    def __init__(self, gateway: PipelineHost) -> None:
        self.gateway = gateway

    async def run(self, call: ToolCall) -> dict[str, Any] | None:
        if isinstance(call.target, CatalogTool):
            try:
                call.resolution = await self.gateway.resolve(call.target, call.params.get("arguments", {}))
            except ResolveError as exc:  # arguments that do not fit the tool's schema
                raise MCPError(code=exc.code, message=str(exc), data=exc.data) from None
        return None


class AllowAll(_StageDefaults):
    """The decide stage until a policy exists: every call found may run."""

    async def run(self, call: ToolCall) -> dict[str, Any] | None:
        return None


class Forward(_StageDefaults):
    """Run a configuration tool, or forward the call to the tool's downstream."""

    def __init__(self, gateway: PipelineHost) -> None:
        self.gateway = gateway

    async def run(self, call: ToolCall) -> dict[str, Any] | None:
        target = call.target
        if isinstance(target, ConfigTool):
            return await target.call(self.gateway, call.params.get("arguments"))
        assert target is not None, "the find stage runs first"
        downstream = self.gateway.downstream_of(target)
        try:
            if call.ctx is not None:
                return await self.gateway.relay.call(
                    call.ctx, downstream, target.name, call.params, call.client.session
                )
            if downstream.era == "legacy":
                result = await self.gateway.relay.plain_call(
                    downstream, target.name, call.params.get("arguments"), call.params.get("_meta")
                )
            else:
                result = await downstream.call_tool(
                    target.name, call.params.get("arguments"), meta=call.params.get("_meta")
                )
        except (Unavailable, CallTimedOut) as exc:
            if isinstance(exc, CallTimedOut):
                call.extra["timed_out"] = True  # the audit log tells a timeout from a tool's error
            return error_result(f"{target.exposed_name}: {exc}")
        if result.get("resultType") == "input_required":
            # Only modern clients take this path, and they answer a modern server themselves.
            check_input_requests(result, call.capabilities or {})
        return result


def standard_pipeline(
    gateway: PipelineHost, decide: Stage | None = None, record: Sequence[Stage] = ()
) -> Pipeline:
    """find → resolve (if needed) → decide → forward → record."""
    later: list[Stage] = [decide or AllowAll(), Forward(gateway), *record]
    stages: list[Stage] = [Find(gateway)]
    if any(stage.needs_hints for stage in later):
        stages.append(Resolve(gateway))
    return Pipeline([*stages, *later])


def fast_lane_fits(call: ToolCall, gateway: PipelineHost) -> bool:
    """Whether a call without a request context can be forwarded: nothing the downstream might
    send back during the call needs a way to reach the client (a legacy server may ask a
    client that declared sampling, elicitation or roots)."""
    target = gateway.lookup(call.name)
    if not isinstance(target, CatalogTool):
        return target is not None  # configuration tools run in-process
    downstream = gateway.downstream_of(target)
    if downstream.era == "modern":
        return True
    capabilities = call.capabilities or {}
    return not any(declares(capabilities, method) for method in CAPABILITY_FOR_REQUEST)

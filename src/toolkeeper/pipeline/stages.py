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

from collections.abc import Sequence
from typing import Any, ClassVar, Protocol

import anyio
from mcp.shared.exceptions import MCPError

from toolkeeper.annotations.resolve import Resolution, ResolveError
from toolkeeper.catalog import CatalogTool
from toolkeeper.pipeline.call import Principal, Target, ToolCall
from toolkeeper.protocol import INVALID_PARAMS


class PipelineHost(Protocol):
    """What the stages use of the running gateway."""

    def lookup(self, exposed_name: str, principal: Principal) -> Target | None:
        """The target of a name in the view the principal sees."""
        ...

    def why_hidden(self, name: str, principal: Principal) -> str:
        """For a name that view does not route: which mode, if any, lists it (as far as the
        principal may know)."""
        ...

    async def resolve_under(self, tool: CatalogTool, arguments: Any, toolset: str | None) -> Resolution:
        """The hints for this call of `tool`, under the toolset it is listed in."""
        ...


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
        principal = call.client.principal
        target = self.gateway.lookup(call.name, principal)
        if target is None:
            raise MCPError(code=INVALID_PARAMS, message=self.gateway.why_hidden(call.name, principal))
        call.target = target
        return None


class Resolve(_StageDefaults):
    """The hints that hold for these arguments (downstream resolution, rules, static hints).
    Only in a pipeline whose later stages read them."""

    def __init__(self, gateway: PipelineHost) -> None:
        self.gateway = gateway

    async def run(self, call: ToolCall) -> dict[str, Any] | None:
        target = call.target
        tool = target.tool if target is not None else None
        if target is not None and tool is not None:
            try:
                call.resolution = await self.gateway.resolve_under(
                    tool, call.params.get("arguments", {}), target.toolset
                )
            except ResolveError as exc:  # arguments that do not fit the tool's schema
                raise MCPError(code=exc.code, message=str(exc), data=exc.data) from None
        return None


class AllowAll(_StageDefaults):
    """The decide stage until a policy exists: every call found may run."""

    async def run(self, call: ToolCall) -> dict[str, Any] | None:
        return None


class Forward(_StageDefaults):
    """Run the call where its target runs it: the gateway's own tool in-process, a downstream's
    tool on its downstream."""

    async def run(self, call: ToolCall) -> dict[str, Any] | None:
        assert call.target is not None, "the find stage runs first"
        return await call.target.forward(call)


def standard_pipeline(
    gateway: PipelineHost, decide: Stage | None = None, record: Sequence[Stage] = ()
) -> Pipeline:
    """find → resolve (if needed) → decide → forward → record."""
    later: list[Stage] = [decide or AllowAll(), Forward(), *record]
    stages: list[Stage] = [Find(gateway)]
    if any(stage.needs_hints for stage in later):
        stages.append(Resolve(gateway))
    return Pipeline([*stages, *later])


def fast_lane_fits(call: ToolCall, gateway: PipelineHost) -> bool:
    """Whether a call can be run without a request context: nothing its target may send back
    during the call needs a way to reach the client."""
    target = gateway.lookup(call.name, call.client.principal)
    return target is not None and not target.needs_client(call)

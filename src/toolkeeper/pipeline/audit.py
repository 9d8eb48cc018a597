"""The audit log's stages: one record per `tools/call`, the configuration tools' included,
however it ended.

- Before the call is forwarded (`AuditAhead`): a call that is not reliably read-only (as the
  policy sees it: read-only by a value it relies on) is recorded as "started", with its
  decision, in the gateway's journal, which a crash does not lose (or, without a journal, it
  waits until that record is committed, at most `WRITE_AHEAD_SECONDS`). A gateway that dies
  during the call leaves "started, outcome unknown", never nothing. The audit fails closed:
  while records cannot be written (the store or the chain refuses them), or when the record
  was not committed in time, such a call does not run, and its client is told why and which
  command shows the problem. Reliably read-only calls skip this: a plain read is recorded
  once it ended, and waits in memory (or leaves a gap record) while the store refuses.
- After the call ended (`AuditLog`): the record, or the completion of the started one.

Both only hand values to the writer (`store/audit/writer.py`): no I/O, no serialisation, no hashing
on the call path; the writer's thread does the rest.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, ClassVar

import anyio
from mcp.shared.exceptions import MCPError

from toolkeeper.pipeline.call import ToolCall
from toolkeeper.pipeline.rate_limits import RATE_LIMITED
from toolkeeper.pipeline.targets import REMOTE_ACCOUNT
from toolkeeper.policy.model import Decision
from toolkeeper.protocol import error_result
from toolkeeper.store.audit.writer import AuditWriter, HintsHeld, Record, Started, UnreadArguments

logger = logging.getLogger(__name__)

# Where the record of a call recorded before it ran waits for its completion (`ToolCall.extra`).
STARTED_RECORD = "audit_started"
# Why a call's arguments were never read (`ToolCall.extra`): the edge refused its message.
ARGUMENTS_UNREAD = "audit_arguments_unread"
# Why a call was not run: its record could not be written (`ToolCall.extra`).
AUDIT_REFUSED = "audit_refused"
NOT_COMMITTED = "the store did not commit the call's record in time"
NOT_CHECKED = "the store did not answer in time when the audit log started"


def reliably_read_only(call: ToolCall) -> bool:
    """Whether the policy relied on the call being read-only. A call the policy did not decide
    on (no decision) is not."""
    decision = call.decision
    return decision is not None and decision.verdict.relied.get("readOnlyHint", False) is True


class AuditAhead:
    """Before forwarding: the record of a call that is not reliably read-only, made safe as
    started. Added before the forward stage (`Pipeline.with_stage(..., before=Forward)`)."""

    after_result: ClassVar[bool] = False
    needs_hints: ClassVar[bool] = False

    def __init__(self, log: AuditLog) -> None:
        self.log = log

    async def run(self, call: ToolCall) -> dict[str, Any] | None:
        """None to go on; a refusal when the call's record cannot be made safe first."""
        if reliably_read_only(call):
            return None
        writer = self.log.writer
        if not writer.checked_now and not await writer.checked():
            return refused(call, NOT_CHECKED)
        refusal = writer.refusal
        if refusal is not None:
            return refused(call, refusal)
        started = writer.start(self.log.record(call))
        # Kept before waiting: a call cancelled while it waits is completed, not recorded twice.
        call.extra[STARTED_RECORD] = started
        if not started.journaled and not await writer.written(started):
            return refused(call, writer.refusal or NOT_COMMITTED)
        return None


def refused(call: ToolCall, why: str) -> dict[str, Any]:
    """The answer to a call that did not run because its record could not be written."""
    call.extra[AUDIT_REFUSED] = why
    return error_result(
        f"toolkeeper did not run {call.name!r}: its audit record cannot be written ({why}). A call that "
        "is not reliably read-only runs only once its record is safe; read-only calls still run. "
        "The person running toolkeeper can see the problem with `toolkeeper audit verify`; once they "
        'have decided, `toolkeeper audit repair --reason "…"` starts a new audit chain segment.'
    )


class AuditLog:
    """The record stage: hands every finished call's record to the writer."""

    after_result: ClassVar[bool] = True
    needs_hints: ClassVar[bool] = False

    def __init__(self, writer: AuditWriter, *, keep_arguments: bool) -> None:
        self.writer = writer
        self.keep_arguments = keep_arguments

    async def run(self, call: ToolCall) -> dict[str, Any] | None:
        # Made in a callback: the fast lanes write the answer before they next yield, so the
        # record is then on nobody's wait. The call's end is taken now.
        asyncio.get_running_loop().call_soon(self._record_ended, call, time.monotonic())
        return None

    def _record_ended(self, call: ToolCall, ended: float) -> None:
        started: Started | None = call.extra.get(STARTED_RECORD)
        try:
            if started is not None:
                outcome, detail = call_outcome(call)
                latency_ms = round((ended - call.started) * 1000)
                self.writer.complete(started, outcome=outcome, detail=detail, latency_ms=latency_ms)
            else:
                self.writer.add(self.record(call, ended=ended))
        except Exception:  # recording must never fail the call it records
            logger.exception("audit log: cannot record a call of %r", call.name)

    def record_refused(self, call: ToolCall) -> None:
        """The record of a call refused before any stage ran (see `Gateway.record_refused`)."""
        try:
            self.writer.add(self.record(call))
        except Exception:  # recording must never fail the answer to the call it records
            logger.exception("audit log: cannot record a call of %r", call.name)

    def record(self, call: ToolCall, *, ended: float | None = None) -> Record:
        """The call's record, as of `ended` (a `time.monotonic()`; default: now)."""
        elapsed = (time.monotonic() if ended is None else ended) - call.started
        target = call.target
        server = tool = ref_id = None
        if target is not None:
            # The gateway's own tools have no server and no refId: the name they were called by.
            catalog_tool = target.tool
            if catalog_tool is not None:
                server, tool, ref_id = catalog_tool.server, catalog_tool.name, catalog_tool.ref_id
            else:
                tool = target.exposed_name
        unread = call.extra.get(ARGUMENTS_UNREAD)
        arguments: Any = call.arguments if unread is None else UnreadArguments(unread)
        decision = call.decision
        outcome, detail = call_outcome(call)
        principal = call.client.principal
        return {
            "kind": "call",
            "at": time.time() - elapsed,
            "client_name": call.client.name,
            "client_version": call.client.version,
            "client_session": call.client.session,
            "exposed_name": call.name,
            "server": server,
            "tool": tool,
            "ref_id": ref_id,
            # The arguments as the call had them; the writer digests (and, if asked, keeps) them
            # off the call path.
            "arguments_sha256": arguments,
            "arguments": arguments if self.keep_arguments and unread is None else None,
            "hints": _hints(call),
            "decision": decision.final.value if decision else Decision.ALLOW.value,
            "decided_by": decision.decided_by if decision else "no policy",
            "channel": decision.channel if decision else None,
            "wait_ms": decision.wait_ms if decision else None,
            "outcome": outcome,
            "detail": detail,
            "latency_ms": round(elapsed * 1000),
            "principal": principal.name,
            "principal_client": principal.client_id,
            "facts": _facts(call),
        }


def _facts(call: ToolCall) -> dict[str, Any] | None:
    """What a call's record says beyond its columns: the remote account it was made with, where
    its server signs in (never the token)."""
    target = call.target
    remote_account = target.remote_account(call) if target is not None else None
    return {REMOTE_ACCOUNT: remote_account} if remote_account is not None else None


def _hints(call: ToolCall) -> HintsHeld | None:
    """The hints that held for the call and where each came from: the policy's view when a
    decide stage ran, else the resolved hints, else none were worked out."""
    if call.decision is not None:
        verdict = call.decision.verdict
        sources = verdict.sources
        return tuple((name, value, sources.get(name)) for name, value in verdict.hints.items())
    if call.resolution is not None:
        source = call.resolution.source
        return tuple((name, value, source) for name, value in call.resolution.hints.items())
    return None


def call_outcome(call: ToolCall) -> tuple[str, str | None]:
    """How the call ended, and the detail a person reading the log needs."""
    limited = call.extra.get(RATE_LIMITED)
    if limited is not None:
        return RATE_LIMITED, limited
    decision = call.decision
    if decision is not None and (decision.final is Decision.DENY or decision.outcome):
        return "not_run", decision.outcome or decision.verdict.reason
    audit_refused = call.extra.get(AUDIT_REFUSED)
    if audit_refused is not None:
        return "not_run", f"its audit record could not be written: {audit_refused}"
    error = call.error
    if error is not None:
        if isinstance(error, MCPError):
            return "protocol_error", error.message
        if isinstance(error, anyio.get_cancelled_exc_class()):
            return "cancelled", None
        return "error", f"{type(error).__name__}: {error}"
    result = call.result or {}
    if call.extra.get("timed_out"):
        return "timeout", _first_text(result)
    if result.get("isError") is True:
        return "isError", None
    return "ok", None


def _first_text(result: dict[str, Any]) -> str | None:
    content = result.get("content")
    if isinstance(content, list) and content and isinstance(content[0], dict):
        text = content[0].get("text")
        return text if isinstance(text, str) else None
    return None

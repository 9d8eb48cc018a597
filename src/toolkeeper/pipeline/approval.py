"""The decide stage: the approval policy's verdict for each call, and asking a person when it says ask.

The policy (policy/decide.py) gives allow, ask or deny. For ask, the first way that works:
1. the calling client asks its user: a handshake-era client gets `elicitation/create` during the
   call; a 2026-07-28 client gets an `InputRequiredResult` whose `requestState` is sealed to
   this client and this exact call, and its retry carries the answer;
2. the pending-approvals queue: the call waits while a person answers with the CLI (or the
   dashboard), through the store;
3. otherwise the call is refused.
A refusal is an `isError` result that says the call was not run and why; it never says how the
model could get the call approved. No MCP tool of the gateway can answer a question.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import anyio
from mcp.shared.exceptions import MCPError

from toolkeeper.annotations.effective import EffectiveHints
from toolkeeper.annotations.hints import HINTS, SPEC_DEFAULTS
from toolkeeper.annotations.patterns import off_loop_when_heavy
from toolkeeper.catalog import CatalogTool
from toolkeeper.config.model import GatewaySettings
from toolkeeper.display import cut, visible_line
from toolkeeper.pipeline.call import ClientIdentity, ToolCall
from toolkeeper.pipeline.stages import PipelineHost
from toolkeeper.policy.binding import call_hash
from toolkeeper.policy.decide import session_scope
from toolkeeper.policy.model import Answer, ConfirmMode, Decision, DecisionRecord, Verdict
from toolkeeper.policy.rules import rules_work
from toolkeeper.protocol import declares, error_result
from toolkeeper.relay.seal import TokenSeal
from toolkeeper.sdk_private import on_connection_end
from toolkeeper.services.approvals import HOLDER
from toolkeeper.store import StoreError
from toolkeeper.store.approvals import APPROVED, DENIED, PENDING, STORE_RESTORED, PendingCall

if TYPE_CHECKING:
    from toolkeeper.policy.decide import Policy
    from toolkeeper.relay.relay import Relay
    from toolkeeper.services import Services

logger = logging.getLogger(__name__)

# The requestState of a question the gate asked a modern client (the relay's own start "toolkeeper:").
STATE_PREFIX = "toolkeeper-approval:"
ANSWER_KEY = "toolkeeper.approval"  # the inputRequests key of the gate's question
# How often a call waiting in the queue tells its client again that it waits (and how long is left).
WAITING_NOTE_SECONDS = 10.0

# toolkeeper's own warnings, from the hint values the policy relies on (see `warnings`).
MAY_DESTROY = "This tool may make destructive changes"
MAY_CHANGE = "This tool may change things"
MAY_REACH_OUT = "This tool may reach outside systems"
# A safe value the policy relies on (someone accountable stands behind it), in toolkeeper's voice.
RELIED_ON = {
    ("readOnlyHint", True): "it only reads data",
    ("destructiveHint", False): "it makes no destructive changes",
    ("openWorldHint", False): "it reaches no outside systems",
}
# A server's claim the policy does not rely on, in the server's voice.
CLAIMS = {
    ("readOnlyHint", True): "read-only",
    ("destructiveHint", False): "not destructive",
    ("idempotentHint", True): "idempotent",
    ("openWorldHint", False): "reaches no outside systems",
}
# How much of each text from outside the question shows (see display.py for the cut's mark).
NAME_MAX = 200  # a server's, a tool's, an argument's name; the server's title
SENTENCE_VALUE_MAX = 80  # a value in the sentence; a longer one is also shown further down
SENTENCE_MAX = 1200  # the sentence; arguments past it are counted
REASON_MAX = 500
NOTE_MAX = 500  # the person's own text for the tool (a confirm mode's)
VALUE_MAX = 1000  # a long value, further down
IN_FULL_MAX = 20  # long values shown further down
MESSAGE_MAX = 4000  # the whole message; what is past it (long values) is cut
PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")
CHOICE_TITLES = {
    Answer.ONCE.value: "Allow once",
    Answer.SESSION.value: "Allow for this session",
    Answer.ALWAYS.value: "Always allow",
    "deny": "Deny",
}


class GateHost(PipelineHost, Protocol):
    """What the gate uses of the running gateway besides what every stage uses."""

    @property
    def policy(self) -> Policy: ...

    @property
    def relay(self) -> Relay: ...

    @property
    def services(self) -> Services | None: ...

    @property
    def settings(self) -> GatewaySettings: ...

    def effective_hints(self, tool: CatalogTool, toolset: str | None) -> EffectiveHints: ...

    def trusts(self, server: str) -> bool: ...

    async def reload_policy(self) -> None: ...


@dataclass(frozen=True)
class Asking:
    """A call the gate asks a person about, with what every way of asking needs."""

    call: ToolCall
    tool: CatalogTool
    digest: str  # binds an answer to this tool and these exact arguments
    verdict: Verdict  # the policy's, before anyone was asked


@dataclass(frozen=True)
class Answered:
    """What came of asking a person about a call."""

    answer: str | None  # once, session, always or deny; None when nobody gave one
    channel: str  # how the person was asked: elicitation, cli, dashboard; queue when nobody answered
    waited_ms: int | None = None  # None when the call did not wait (a modern client's retry)
    timed_out: bool = False
    store_restored: bool = False  # a backup replaced the store while the call waited in its queue
    decided_by: str | None = None  # who answered, as the face they used recorded it
    reason: str | None = None  # why they declined, when they said

    @property
    def who(self) -> str:
        return self.decided_by or f"person via {self.channel}"


class ApprovalGate:
    after_result: ClassVar[bool] = False
    needs_hints: ClassVar[bool] = True

    def __init__(self, gateway: GateHost) -> None:
        self.gateway = gateway
        # The relay's seal: one key (the replicas' where they share a store), one issuer's name.
        self.seal: TokenSeal = gateway.relay.seal
        # Per session: call hash → when a person last approved it (for idempotent retries).
        self.approved: dict[str, dict[str, float]] = {}
        self._memo_policy: Policy | None = None
        self._memo: dict[tuple[str, str, str | None], tuple[EffectiveHints, Verdict]] = {}

    async def run(self, call: ToolCall) -> dict[str, Any] | None:
        tool = call.target.tool if call.target is not None else None
        if tool is None:
            verdict = Verdict(Decision.ALLOW, "the gateway's own configuration tool", "configuration tool")
            call.decision = DecisionRecord(verdict, Decision.ALLOW, verdict.made_by)
            return None
        state = call.params.get("requestState")
        if isinstance(state, str) and state.startswith(STATE_PREFIX):
            digest = call_hash(tool.server, tool.name, call.arguments, tool.ref_id)
            return await self._answered_by_client(call, tool, digest, state)
        verdict = await self._verdict(call, tool)
        if verdict.decision is Decision.ALLOW:
            call.decision = DecisionRecord(verdict, Decision.ALLOW, verdict.made_by)
            return None
        if verdict.decision is Decision.DENY:
            call.decision = DecisionRecord(
                verdict, Decision.DENY, verdict.made_by, outcome="denied by policy"
            )
            return refusal(tool, f"the approval policy denies it ({verdict.reason})")
        digest = call_hash(tool.server, tool.name, call.arguments, tool.ref_id)
        return await self._ask(Asking(call, tool, digest, verdict))

    async def _verdict(self, call: ToolCall, tool: CatalogTool) -> Verdict:
        resolution = call.resolution
        assert resolution is not None, "the resolve stage runs before the gate"
        session = call.client.session
        binding = call.client.binding  # None: no session a rule or a retry's approval is kept for
        retry_approved = False
        approvals = self.approved.get(binding) if binding is not None else None
        if approvals:
            approved_at = approvals.get(call_hash(tool.server, tool.name, call.arguments, tool.ref_id))
            window = self.gateway.settings.retry_window
            retry_approved = approved_at is not None and time.monotonic() - approved_at <= window
        policy = self.gateway.policy
        toolset = listed_under(call)
        effective = self.gateway.effective_hints(tool, toolset)
        # With the tool's static hints and no rule that reads arguments, the verdict is the same
        # for every call of the tool in a session until the policy or the view changes: decide
        # once (the effective hints are rebuilt with the view, so they date the memo).
        memo = resolution.source == "static" and not retry_approved and not policy.reads_arguments
        if memo:
            if self._memo_policy is not policy:
                self._memo_policy, self._memo = policy, {}
            known = self._memo.get((tool.namespaced_name, session, toolset))
            if known is not None and known[0] is effective:
                return known[1]
        decide = partial(
            policy.decide,
            tool,
            call.arguments,
            resolution,
            effective,
            trusted=self.gateway.trusts(tool.server),
            toolset=toolset,
            session=binding,
            retry_approved=retry_approved,
        )
        # A rule's pattern over a long argument is tested in a worker thread: other calls go on.
        rules = (r.rule for r in policy.rules_for(binding))
        work = rules_work(rules, call.arguments, server=tool.server, tool=tool.name)
        verdict = await off_loop_when_heavy(work, decide)
        if memo:
            self._memo[(tool.namespaced_name, session, toolset)] = (effective, verdict)
        return verdict

    # -- asking --------------------------------------------------------------------------------

    async def _ask(self, asking: Asking) -> dict[str, Any] | None:
        call, tool, verdict = asking.call, asking.tool, asking.verdict
        question = build_question(tool, call.arguments, verdict, self._choices(call, tool))
        capabilities = self._capabilities(call)
        if declares(capabilities, "elicitation/create"):
            if call.modern:
                # The question goes back as the call's result; the client's retry answers it.
                call.decision = DecisionRecord(verdict, Decision.ASK, verdict.made_by, channel="elicitation")
                timeout = self.gateway.settings.approval_timeout
                token = self.seal.issue(call.client.session, asking.digest, timeout)
                return {
                    "resultType": "input_required",
                    "inputRequests": {ANSWER_KEY: {"method": "elicitation/create", "params": form(question)}},
                    "requestState": STATE_PREFIX + token,
                }
            if call.ctx is not None:
                return await self._elicit_during_call(asking, question)
        if self.gateway.services is not None:
            return await self._queue(asking, question)
        call.decision = DecisionRecord(verdict, Decision.DENY, verdict.made_by, outcome="cannot_ask")
        return refusal(tool, "it needs a person's approval and there is no way to ask one")

    def _capabilities(self, call: ToolCall) -> dict[str, Any]:
        if call.capabilities is not None:
            return call.capabilities
        if call.ctx is not None:
            declared = call.ctx.session.client_capabilities
            return declared.model_dump(by_alias=True, exclude_none=True) if declared else {}
        return {}

    def _choices(self, call: ToolCall, tool: CatalogTool) -> list[str]:
        mode, _ = self.gateway.policy.confirm_mode(tool, listed_under(call))
        if mode is ConfirmMode.ALWAYS:
            return [Answer.ONCE.value, "deny"]  # the person asked to confirm every call
        if call.client.binding is None:  # no session another program could not claim too
            return [Answer.ONCE.value, Answer.ALWAYS.value, "deny"]
        return [*(answer.value for answer in Answer), "deny"]

    async def _elicit_during_call(self, asking: Asking, question: dict[str, Any]) -> dict[str, Any] | None:
        ctx = asking.call.ctx
        assert ctx is not None
        started = time.monotonic()
        answer: str | None = None
        with anyio.move_on_after(self.gateway.settings.approval_timeout) as scope:
            try:
                reply = await self.gateway.relay.ask_client(ctx, "elicitation/create", form(question))
                answer = chosen(reply, question["choices"])
            except MCPError as exc:
                logger.info(
                    "%s: the client could not ask its user (%s); refused", asking.tool.exposed_name, exc
                )
        answered = Answered(answer, "elicitation", _ms_since(started), timed_out=scope.cancelled_caught)
        return await self._conclude(asking, answered)

    async def _answered_by_client(
        self, call: ToolCall, tool: CatalogTool, digest: str, state: str
    ) -> dict[str, Any] | None:
        """A modern client's retry: the sealed state must be ours, fresh, unused, for this
        client and these exact arguments; anything else is refused and recorded."""
        verdict = await self._verdict(call, tool)
        token = state.removeprefix(STATE_PREFIX)
        problem = self.seal.check(token, call.client.session, digest)
        if problem is None:
            problem = await self._spend_everywhere(token)
        if problem is not None:
            call.decision = DecisionRecord(
                verdict, Decision.DENY, "toolkeeper", "elicitation", outcome="bad_token"
            )
            return refusal(tool, f"its approval answer was not accepted ({problem}); call the tool again")
        responses = call.params.get("inputResponses")
        reply = responses.get(ANSWER_KEY) if isinstance(responses, dict) else None
        answer = chosen(reply, self._choices(call, tool))
        # The retry's envelope was for the gate alone: the downstream sees the plain call.
        call.params = {k: v for k, v in call.params.items() if k not in ("requestState", "inputResponses")}
        return await self._conclude(Asking(call, tool, digest, verdict), Answered(answer, "elicitation"))

    async def _spend_everywhere(self, token: str) -> str | None:
        """A good token was spent on this replica; where replicas share a store, on every one
        (None), or what is wrong."""
        services, spent = self.gateway.services, self.seal.spent(token)
        if services is None or spent is None:
            return None
        try:
            if await services.approvals.spend_request_state(*spent):
                return None
        except StoreError as exc:
            return f"the store could not record its use ({exc})"
        return "the request state was already used"

    async def _queue(self, asking: Asking, question: dict[str, Any]) -> dict[str, Any] | None:
        """The call waits in the queue for a person's answer through the store. First, in order:
        a gateway that is stopping queues nothing; a late yes kept for this very call from this
        client lets it run unasked. While it waits, its client hears what it waits for and how a
        person answers, if anything reaches that client alone."""
        services = self.gateway.services
        assert services is not None
        call, tool, verdict = asking.call, asking.tool, asking.verdict
        if services.approvals.stopping is not None:
            return self._shutting_down(asking, services.approvals.stopping)
        late = await self._late_yes(asking)
        if late is not None:
            return await self._conclude(asking, late)
        timeout = self.gateway.settings.approval_timeout
        pending = pending_call(asking, question, timeout)
        try:
            await services.approvals.open(pending)
        except StoreError as exc:
            logger.error("cannot queue %s for approval: %s", tool.exposed_name, exc)
            call.decision = DecisionRecord(verdict, Decision.DENY, verdict.made_by, outcome="cannot_ask")
            return refusal(tool, "it needs a person's approval and the approval queue cannot be written")
        logger.warning(
            "%s waits up to %.0f s for approval %s: toolkeeper approvals approve %s (or deny %s)",
            tool.exposed_name,
            timeout,
            pending.id,
            pending.id,
            pending.id,
        )
        started = time.monotonic()
        async with anyio.create_task_group() as telling:
            if call.ctx is not None:
                telling.start_soon(self._say_it_waits, call, pending.id, started)
            settled = await services.approvals.wait_for_answer(pending.id, timeout)
            telling.cancel_scope.cancel()
        if settled is None and services.approvals.stopping is not None:
            return self._shutting_down(asking, services.approvals.stopping, waited_ms=_ms_since(started))
        answered = queue_answer(settled, _ms_since(started))
        if settled is not None and settled.status == APPROVED:
            refused = await self._claim_run(asking, answered, pending.id)
            if refused is not None:
                return refused
        return await self._conclude(asking, answered)

    async def _claim_run(self, asking: Asking, answered: Answered, approval_id: str) -> dict[str, Any] | None:
        """An approved call runs on one replica, which its row names: this one, unless another
        claimed it (None: this one runs it), or the store cannot say (refused, not run twice)."""
        services = self.gateway.services
        assert services is not None
        replica = self.gateway.settings.replica
        try:
            if await services.approvals.claim_run(approval_id, replica):
                return None
            problem = "another replica of the gateway ran it"
        except StoreError as exc:
            problem = f"the store could not record which replica runs it ({exc})"
        logger.warning("%s: approval %s was given, but %s", asking.tool.exposed_name, approval_id, problem)
        asking.call.decision = DecisionRecord(
            asking.verdict,
            Decision.DENY,
            answered.who,
            channel=answered.channel,
            wait_ms=answered.waited_ms,
            outcome="not_claimed",
        )
        return refusal(asking.tool, f"it was approved, but {problem}; call the tool again")

    async def _late_yes(self, asking: Asking) -> Answered | None:
        """A person's yes that came after this call's earlier caller stopped waiting, kept for the
        same call (tool, arguments, definition) retried by the same principal and client name
        within `retryWindow`: taken here, once, whichever gateway process holds the retry."""
        services = self.gateway.services
        assert services is not None
        client = asking.call.client
        try:
            late = await services.approvals.take_late_yes(
                asking.digest,
                principal=client.principal.name,
                client_name=client.name,
                within=self.gateway.settings.retry_window,
                replica=self.gateway.settings.replica,
            )
        except StoreError as exc:
            logger.warning("cannot look for a late approval of %s: %s", asking.tool.exposed_name, exc)
            return None
        if late is None:
            return None
        logger.info(
            "%s runs on approval %s, given after its caller stopped waiting",
            asking.tool.exposed_name,
            late.id,
        )
        return Answered(late.answer or Answer.ONCE.value, late.channel or "cli", decided_by=late.decided_by)

    async def _say_it_waits(self, call: ToolCall, approval_id: str, started: float) -> None:
        """Tell the waiting call's client, now and every WAITING_NOTE_SECONDS, what the call waits
        for and how a person answers: as progress if it sent a progress token, else as a log
        message on the call's own stream (see `Relay.tell_caller`)."""
        assert call.ctx is not None
        timeout = self.gateway.settings.approval_timeout
        while True:
            waited = time.monotonic() - started
            note = waiting_note(call.name, approval_id, max(0.0, timeout - waited))
            try:
                await self.gateway.relay.tell_caller(
                    call.ctx, call.params, text=note, progress=round(waited, 1), total=timeout
                )
            except Exception as exc:  # a client that went away: the wait goes on all the same
                logger.debug("could not tell %s that its call waits: %s", call.client.label(), exc)
                return
            await anyio.sleep(WAITING_NOTE_SECONDS)

    def _shutting_down(self, asking: Asking, reason: str, *, waited_ms: int | None = None) -> dict[str, Any]:
        """The refusal of a call the gateway stopped waiting for (`waited_ms`), or would not queue."""
        asking.call.decision = DecisionRecord(
            asking.verdict,
            Decision.DENY,
            "toolkeeper",
            channel="queue",
            wait_ms=waited_ms,
            outcome="shutdown",
        )
        when = (
            "while it waited for a person's approval"
            if waited_ms is not None
            else "and it needs a person's approval"
        )
        return refusal(asking.tool, f"the gateway is shutting down ({reason}) {when}")

    # -- concluding ----------------------------------------------------------------------------

    async def _conclude(self, asking: Asking, answered: Answered) -> dict[str, Any] | None:
        if answered.answer is None or answered.answer == "deny":
            return self._refuse(asking, answered)
        await self._allow(asking, answered, Answer(answered.answer))
        return None

    def _refuse(self, asking: Asking, answered: Answered) -> dict[str, Any]:
        if answered.timed_out:
            outcome, why = "timeout", "nobody answered the approval request in time"
        elif answered.store_restored:
            outcome = "store_restored"
            why = "the store was restored from a backup while it waited for approval; call the tool again"
        elif answered.answer == "deny":
            outcome, why = "declined", "a person declined it"
            if answered.reason:
                why += f": {answered.reason}"
        else:
            outcome, why = "declined", "a person declined it (the approval request was dismissed)"
        asking.call.decision = DecisionRecord(
            asking.verdict,
            Decision.DENY,
            answered.who if answered.answer == "deny" else "toolkeeper",
            channel=answered.channel,
            wait_ms=answered.waited_ms,
            outcome=outcome,
        )
        return refusal(asking.tool, why)

    async def _allow(self, asking: Asking, answered: Answered, answer: Answer) -> None:
        call = asking.call
        call.decision = DecisionRecord(
            asking.verdict,
            Decision.ALLOW,
            answered.who,
            channel=answered.channel,
            wait_ms=answered.waited_ms,
            answer=answer,
        )
        if call.client.binding is not None:
            self.approved.setdefault(call.client.binding, {})[asking.digest] = time.monotonic()
        scope = self._reach(asking, answer)
        if scope is not None:
            # The rule names whose call the yes was given for (a session's rule holds only in
            # that principal's session, whose name carries the principal).
            await self._remember(asking.tool, scope, f"{answered.who} for {call.client.principal.label()}")
            if scope and call.ctx is not None and not call.modern and call.client.binding is not None:
                # A handshake-era session lives as long as its connection: its rules end with it
                # (a 2026-07-28 request's connection is that request alone).
                on_connection_end(call.ctx.session, self._session_ended, call.client.binding)

    async def _session_ended(self, binding: str) -> None:
        services = self.gateway.services
        if services is None:
            return
        try:
            if await services.policy.revoke_session_rules(binding):
                await self.gateway.reload_policy()
        except Exception as exc:  # the gateway removes them as it stops, or at its next start
            logger.warning("could not remove the approval rules of an ended session: %s", exc)
        self.approved.pop(binding, None)

    def _reach(self, asking: Asking, answer: Answer) -> str | None:
        """The scope of the approval rule a yes becomes: '' for always, the session's for a
        session (or a tool confirmed once per session); None when the yes is for this call, or
        when the client has no session to keep it for (then every call is asked)."""
        mode, _ = self.gateway.policy.confirm_mode(asking.tool, listed_under(asking.call))
        if answer is Answer.ALWAYS:
            return ""
        binding = asking.call.client.binding
        if binding is not None and (answer is Answer.SESSION or mode is ConfirmMode.SESSION):
            return session_scope(binding)
        return None

    async def _remember(self, tool: CatalogTool, scope: str, who: str) -> None:
        """A yes for the session or for always becomes an approval rule the person can list and
        revoke. It names the tool's refId, so a changed definition is asked again."""
        services = self.gateway.services
        if services is None:
            return
        rule = {
            "match": {"server": tool.server, "tool": tool.name, "refId": tool.ref_id},
            "decision": "allow",
        }
        try:
            await services.policy.add_rule(json.dumps(rule), scope=scope, origin=who)
            await self.gateway.reload_policy()
        except Exception as exc:  # the call itself was approved; only the memory of it failed
            logger.error("could not save the approval rule for %s: %s", tool.exposed_name, exc)


def listed_under(call: ToolCall) -> str | None:
    """The toolset whose confirm modes and pins hold for this call: the one its tool is listed under."""
    return call.target.toolset if call.target is not None else None


def refusal(tool: CatalogTool, why: str) -> dict[str, Any]:
    return error_result(f"{tool.exposed_name} was not run: {why}.")


def chosen(reply: Any, choices: list[str]) -> str | None:
    """The person's answer in an elicitation result; anything malformed or unexpected is a no."""
    if not isinstance(reply, Mapping) or reply.get("action") != "accept":
        return None
    content = reply.get("content")
    answer = content.get("answer") if isinstance(content, Mapping) else None
    return answer if isinstance(answer, str) and answer in choices else None


def pending_call(asking: Asking, question: dict[str, Any], timeout: float) -> PendingCall:
    """The queue's row for a call that waits up to `timeout` seconds for a person."""
    call, tool = asking.call, asking.tool
    created = datetime.now(UTC)
    return PendingCall(
        id=secrets.token_hex(4),
        created_at=created,
        expires_at=created + timedelta(seconds=timeout),
        status=PENDING,
        client={**client_json(call.client), "holder": HOLDER},
        exposed_name=tool.exposed_name,
        namespaced_name=tool.namespaced_name,
        ref_id=tool.ref_id,
        call_hash=asking.digest,
        arguments=call.arguments,
        question=question,
        answer=None,
        reason=None,
        decided_by=None,
        decided_at=None,
        principal=call.client.principal.name,
    )


def queue_answer(settled: PendingCall | None, waited_ms: int) -> Answered:
    """What came of a queued call: the person's answer from its row, a restore, or a timeout."""
    if settled is None:
        return Answered(None, "queue", waited_ms, timed_out=True)
    if settled.status == STORE_RESTORED:
        return Answered(None, "queue", waited_ms, store_restored=True, decided_by=settled.decided_by)
    answer = "deny" if settled.status == DENIED else settled.answer or Answer.ONCE.value
    return Answered(
        answer,
        # The CLI was the queue's one face before answers recorded theirs.
        settled.channel or "cli",
        waited_ms,
        decided_by=settled.decided_by,
        reason=settled.reason,
    )


def waiting_note(tool: str, approval_id: str, left: float) -> str:
    """What a waiting call's client is told: what the call waits for and how a person answers."""
    return (
        f"{tool} waits for a person's approval (ID {approval_id}), up to {left:.0f} s more: "
        f"a person answers with `toolkeeper approvals approve {approval_id}` "
        f"or `toolkeeper approvals deny {approval_id}`."
    )


def _ms_since(started: float) -> int:
    return int((time.monotonic() - started) * 1000)


def client_json(client: ClientIdentity) -> dict[str, Any]:
    return {"name": client.name, "version": client.version, "session": client.session}


def build_question(
    tool: CatalogTool, arguments: Mapping[str, Any], verdict: Verdict, choices: list[str]
) -> dict[str, Any]:
    """What a person is asked about a call, every text from outside made visible on one line and
    bounded (see `form` for the order it is read in): toolkeeper's own facts (the server as
    configured, the tool, what the call does with which arguments, warnings from the hint values
    the policy relies on, why it asks), then what the server says of itself, as the server's."""
    declared = tool.declared.get("annotations")
    server_title = tool.declared.get("title") or (
        declared.get("title") if isinstance(declared, Mapping) else None
    )
    server_title = visible_line(server_title, NAME_MAX) if isinstance(server_title, str) else None
    relied = {hint: verdict.relied.get(hint, SPEC_DEFAULTS[hint]) for hint in HINTS}
    return {
        "title": server_title or name_shown(tool.name),  # read by faces from before serverTitle
        "server": visible_line(tool.server, NAME_MAX),
        "tool": visible_line(tool.exposed_name, NAME_MAX),
        "toolName": name_shown(tool.name),
        "sentence": sentence(tool, arguments),
        "warnings": warnings(relied),
        "reliedOn": [
            f"{text} ({verdict.sources[hint]})" if hint in verdict.sources else text
            for (hint, value), text in RELIED_ON.items()
            if relied[hint] is value and not (hint == "destructiveHint" and relied["readOnlyHint"])
        ],
        "reason": visible_line(verdict.reason, REASON_MAX),
        "text": visible_line(verdict.text, NOTE_MAX) if verdict.text else None,
        "serverTitle": server_title,
        "claims": [
            CLAIMS.get((hint, value), f"{hint} {str(value).lower()}")
            for hint, value in verdict.claims.items()
        ],
        "argumentsInFull": in_full(arguments),
        "choices": choices,
    }


def warnings(relied: Mapping[str, bool]) -> list[str]:
    """toolkeeper's own warnings: from the hint values the policy relies on, never from a claim
    it does not rely on (an untrusted server's "read-only" still may change things)."""
    found = []
    if not relied["readOnlyHint"]:
        found.append(MAY_DESTROY if relied["destructiveHint"] else MAY_CHANGE)
    if relied["openWorldHint"]:
        found.append(MAY_REACH_OUT)
    return found


def name_shown(name: str) -> str:
    """A name from outside (a tool's, an argument's) as the question shows it: as it is when it is
    a plain identifier, else quoted as JSON, so its ends show and it cannot pass for words of the
    sentence around it: the key `path "a.txt" and action` shows as `"path \\"a.txt\\" and action"`)."""
    if PLAIN_NAME.fullmatch(name):
        return name
    return visible_line(json.dumps(name, ensure_ascii=False), NAME_MAX)


def value_shown(value: Any, limit: int) -> str:
    return visible_line(json.dumps(value, ensure_ascii=False, default=str), limit)


def sentence(tool: CatalogTool, arguments: Mapping[str, Any]) -> str:
    """The arguments as words: `Call manage_files on files with action "delete" and path "a.txt".`
    Every argument is named, in order, with its value cut short; those that do not fit in
    `SENTENCE_MAX` characters are counted."""
    head = f"Call {name_shown(tool.name)} on {visible_line(tool.server, NAME_MAX)}"
    if not arguments:
        return head + " with no arguments."
    parts: list[str] = []
    size = len(head)
    for name, value in arguments.items():
        part = f"{name_shown(name)} {value_shown(value, SENTENCE_VALUE_MAX)}"
        size += len(part) + 2
        if size > SENTENCE_MAX:
            break
        parts.append(part)
    left = len(arguments) - len(parts)
    if left:
        parts.append(f"{left:,} more {'argument' if left == 1 else 'arguments'} not shown here")
    joined = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    return f"{head} with {joined}."


def in_full(arguments: Mapping[str, Any]) -> list[str]:
    """The arguments whose values the sentence cut, each as `"name": value` up to `VALUE_MAX`
    characters: after every name, so nothing hides behind a long value."""
    lines = []
    for name, value in arguments.items():
        shown = value_shown(value, VALUE_MAX)
        if shown != value_shown(value, SENTENCE_VALUE_MAX):
            lines.append(f"{visible_line(json.dumps(name, ensure_ascii=False), NAME_MAX)}: {shown}")
            if len(lines) == IN_FULL_MAX:
                break
    return lines


def form(question: Mapping[str, Any]) -> dict[str, Any]:
    """The `elicitation/create` params of a question: a message and one required choice. The
    message says toolkeeper's own facts first, then what the server says of itself as the
    server's, then the long values; it is cut at `MESSAGE_MAX` characters, from its end."""
    lines = [
        "toolkeeper asks: may this call run?",
        f"Server: {question['server']} (as configured). Tool: {question.get('toolName', question['tool'])}.",
        question["sentence"],
        *(f"⚠ {warning}" for warning in question["warnings"]),
        *(f"toolkeeper relies on this: {fact}" for fact in question.get("reliedOn", ())),
        f"Why you are asked: {question['reason']}",
    ]
    if question.get("text"):
        lines.append(f"Your note for this tool: {question['text']}")
    if question.get("serverTitle") or question.get("claims"):
        lines.append("What the server says of itself (not checked by toolkeeper):")
        if question.get("serverTitle"):
            lines.append(f"  the server calls it: {question['serverTitle']}")
        if question.get("claims"):
            lines.append(f"  the server claims: {', '.join(question['claims'])}")
    if question.get("argumentsInFull"):
        lines.append(f"Long values in full (each cut at {VALUE_MAX:,} characters):")
        lines.extend(f"  {line}" for line in question["argumentsInFull"])
    choices = question["choices"]
    return {
        "mode": "form",
        "message": cut("\n".join(lines), MESSAGE_MAX),
        "requestedSchema": {
            "type": "object",
            "properties": {
                "answer": {
                    "type": "string",
                    "title": "Your answer",
                    "enum": choices,
                    "enumNames": [CHOICE_TITLES[c] for c in choices],
                }
            },
            "required": ["answer"],
        },
    }

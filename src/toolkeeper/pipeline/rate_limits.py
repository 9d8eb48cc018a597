"""The rate limits stage: a call over one of the principal's limits is refused, with which limit
and when to retry, before anyone is asked about it and before its hints are resolved.

The limits (toolkeeper.rateLimits): each principal's calls together (`perPrincipal`, or the
principal's own entry in `principals`), and each principal's calls of a tool (`tools`). Each is a
bucket counted as config/rates.py says. Where the gateway's store is PostgreSQL, every replica
counts in it (store/rate_buckets.py), so a limit holds for all of them together; with SQLite, or
while PostgreSQL cannot be reached, each gateway process counts its own calls in memory
(pipeline/rate_buckets.py). A bucket found full is remembered until it has room again, so that
a principal who floods is refused without a store round trip, and nobody else waits behind it.

A gateway without limits has no such stage: its calls pay nothing.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import anyio

from toolkeeper.config.model import GatewaySettings
from toolkeeper.config.rates import Rate
from toolkeeper.pipeline.call import ToolCall
from toolkeeper.pipeline.rate_buckets import MemoryBuckets
from toolkeeper.policy.model import Decision, DecisionRecord, Verdict
from toolkeeper.protocol import error_result
from toolkeeper.store import Store, StoreError, rate_buckets

logger = logging.getLogger(__name__)

# Where a refused call keeps why, for its audit record (`ToolCall.extra`), and the outcome recorded.
RATE_LIMITED = "rate_limited"
# Where the refusal's `_meta` says which limit and when to retry (`retryAfter`, in seconds).
META_KEY = "toolkeeper/rateLimit"
# How long a call waits for the shared count before this replica counts on its own.
STORE_SECONDS = 2.0
# After the shared count failed, how long this replica counts on its own before it tries again.
OUTAGE_SECONDS = 5.0
# Past this many remembered (principal, tool) pairs or full buckets, the memo starts over.
MEMO_MAX = 4096


@dataclass(frozen=True)
class Limit:
    """One bucket a call takes from: its subject (unique per principal, or per principal and
    tool), its rate, the setting it comes from, and whose calls it counts, for the refusal."""

    subject: str
    rate: Rate
    setting: str  # under `toolkeeper.`, as a person finds it in the file
    counts: str  # "calls by ci-bot", "calls of github.create_issue by ci-bot"


@dataclass(frozen=True)
class RateLimits:
    per_principal: Rate | None
    principals: Mapping[str, Rate | None]
    tools: Mapping[str, Rate]

    @classmethod
    def from_settings(cls, settings: GatewaySettings) -> RateLimits:
        return cls(
            settings.rate_limit_per_principal, settings.rate_limit_principals, settings.rate_limit_tools
        )

    @property
    def any(self) -> bool:
        """Whether any call can be limited."""
        return bool(self.per_principal or any(self.principals.values()) or self.tools)

    def for_call(self, principal: str, tool: str | None) -> tuple[Limit, ...]:
        """The limits a call by `principal` (its name) of `tool` ("server.tool"; None for the
        gateway's own tools) takes from. A principal's own entry replaces `perPrincipal`; a
        tool's limit holds for every principal."""
        limits = []
        if principal in self.principals:
            rate, setting = self.principals[principal], f"rateLimits.principals[{json.dumps(principal)}]"
        else:
            rate, setting = self.per_principal, "rateLimits.perPrincipal"
        if rate is not None:
            limits.append(Limit(json.dumps(["principal", principal]), rate, setting, f"calls by {principal}"))
        tool_rate = self.tools.get(tool) if tool is not None else None
        if tool_rate is not None:
            limits.append(
                Limit(
                    json.dumps(["tool", tool, principal]),
                    tool_rate,
                    f"rateLimits.tools[{json.dumps(tool)}]",
                    f"calls of {tool} by {principal}",
                )
            )
        return tuple(limits)


class RateLimit:
    """The stage. Added before the resolve stage (`Pipeline.with_stage(..., before=Resolve)`)."""

    after_result: ClassVar[bool] = False
    needs_hints: ClassVar[bool] = False

    def __init__(self, limits: RateLimits, store: Store | None) -> None:
        """`store`: the gateway's store; only a PostgreSQL one is counted in."""
        self.limits = limits
        self.shared = store if store is not None and not store.is_sqlite else None
        self.memory = MemoryBuckets()
        self._limits_of: dict[tuple[str, str | None], tuple[Limit, ...]] = {}
        # Buckets found full, with when each has room again (`time.monotonic()`).
        self._full_until: dict[str, float] = {}
        self._shared_again_at = 0.0

    async def run(self, call: ToolCall) -> dict[str, Any] | None:
        tool = call.target.tool if call.target is not None else None
        key = (call.client.principal.name, tool.namespaced_name if tool is not None else None)
        limits = self._limits_of.get(key)
        if limits is None:
            if len(self._limits_of) >= MEMO_MAX:
                self._limits_of = {}
            limits = self._limits_of[key] = self.limits.for_call(*key)
        if not limits:
            return None
        reached = self._known_full(limits) or await self._take(limits)
        return None if reached is None else refusal(call, *reached)

    def _known_full(self, limits: tuple[Limit, ...]) -> tuple[Limit, float] | None:
        now = time.monotonic()
        for limit in limits:
            until = self._full_until.get(limit.subject)
            if until is not None and until > now:
                return limit, until - now
        return None

    async def _take(self, limits: tuple[Limit, ...]) -> tuple[Limit, float] | None:
        wanted = [(limit.subject, limit.rate) for limit in limits]
        found: tuple[int, float] | None
        if self.shared is not None and time.monotonic() >= self._shared_again_at:
            try:
                with anyio.fail_after(STORE_SECONDS):
                    found = await self._take_shared(self.shared, wanted)
            except (StoreError, TimeoutError) as exc:
                self._store_failed(exc)
            else:
                if found is not None:
                    self._remember_full(limits[found[0]], found[1])
                return None if found is None else (limits[found[0]], found[1])
        found = self.memory.take(wanted)
        return None if found is None else (limits[found[0]], found[1])

    async def _take_shared(self, store: Store, wanted: list[tuple[str, Rate]]) -> tuple[int, float] | None:
        async with store.read() as conn:
            conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
            for position, (subject, rate) in enumerate(wanted):
                wait = await rate_buckets.take(conn, subject, rate)
                if wait is not None:
                    # The call does not run: what it took from its other buckets goes back.
                    for taken_subject, taken_rate in wanted[:position]:
                        await rate_buckets.give_back(conn, taken_subject, taken_rate)
                    return position, wait
        return None

    def _store_failed(self, exc: Exception) -> None:
        """Count in memory for a while; said once however many calls in flight failed with it."""
        now = time.monotonic()
        if now >= self._shared_again_at:
            logger.warning(
                "rate limits: the store cannot count calls (%s); this replica counts its own for "
                "the next %g seconds",
                exc if str(exc) else f"no answer in {STORE_SECONDS:g} s",
                OUTAGE_SECONDS,
            )
        self._shared_again_at = now + OUTAGE_SECONDS

    def _remember_full(self, limit: Limit, wait: float) -> None:
        now = time.monotonic()
        if len(self._full_until) >= MEMO_MAX:
            self._full_until = {s: until for s, until in self._full_until.items() if until > now}
        self._full_until[limit.subject] = now + wait


def refusal(call: ToolCall, limit: Limit, wait: float) -> dict[str, Any]:
    """The answer to a call over `limit`, which has room again in `wait` seconds; its audit
    record says so (outcome `rate_limited`)."""
    retry_after = max(math.ceil(wait * 10) / 10, 0.1)
    setting = f"toolkeeper.{limit.setting}"
    why = f"{limit.counts} are limited to {limit.rate} ({setting})"
    call.extra[RATE_LIMITED] = f"{why}; retry in {retry_after:g} s"
    verdict = Verdict(Decision.DENY, why, f"rate limit {setting}")
    call.decision = DecisionRecord(verdict, Decision.DENY, verdict.made_by, outcome=RATE_LIMITED)
    result = error_result(
        f"toolkeeper did not run {call.name!r}: {why}, and that limit is reached. "
        f"Retry in {retry_after:g} seconds."
    )
    result["_meta"] = {META_KEY: {"limit": setting, "rate": limit.rate.written, "retryAfter": retry_after}}
    return result

"""The service layer: every operation a person can do, once, for the MCP, CLI and web faces.

`build_services` is the one place the services are wired together: the gateway builds them
over its live catalog, the CLI over the store alone (no catalog: offline) or takes the running
gateway's.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from toolkeeper.annotations.effective import Annotator
from toolkeeper.catalog import Catalog
from toolkeeper.config.model import Config
from toolkeeper.services.approvals import ApprovalService
from toolkeeper.services.audit import AuditService
from toolkeeper.services.backup import BackupService
from toolkeeper.services.costs import CostService, ListingCosts
from toolkeeper.services.hints import HintService
from toolkeeper.services.keys import KeyService
from toolkeeper.services.listing import ListingService
from toolkeeper.services.policy import PolicyService
from toolkeeper.services.reloads import ReloadService
from toolkeeper.services.rules import Resolver, RuleService
from toolkeeper.services.signin import SignInHandoffs
from toolkeeper.services.toolsets import Change, ToolsetService
from toolkeeper.store import Store


@dataclass(frozen=True)
class Services:
    toolsets: ToolsetService
    hints: HintService
    rules: RuleService
    approvals: ApprovalService
    audit: AuditService
    policy: PolicyService
    backup: BackupService
    keys: KeyService
    reloads: ReloadService
    sign_in_handoffs: SignInHandoffs
    listing: ListingService
    costs: CostService


def _offline() -> Catalog | None:
    return None


def _uncounted() -> ListingCosts | None:
    return None


def build_services(
    store: Store,
    *,
    annotator: Callable[[], Annotator],
    catalog: Callable[[], Catalog | None] = _offline,
    costs: Callable[[], ListingCosts | None] = _uncounted,
    resolver: Resolver | None = None,
    on_change: Callable[[Change], Awaitable[None]] | None = None,
    config: Config | None = None,
) -> Services:
    """The services over one store. Without `catalog` they work offline: operations that
    need the servers say so; without `costs` (the current listings') no token costs are shown;
    without `resolver` rules cannot be tested; `on_change` hears of every write (the gateway
    rebuilds its listing); without `config` the policy has the default settings and no
    configured confirm modes, late approvals the default retry window, and the servers a client
    key names are not checked."""
    counted = CostService(costs)
    toolsets = ToolsetService(store, catalog, on_change, costs=counted)
    hints = HintService(store, catalog, annotator, on_change)
    policy = PolicyService(store, catalog, annotator, resolver, config, on_change)
    return Services(
        toolsets=toolsets,
        hints=hints,
        rules=RuleService(store, catalog, resolver, on_change),
        approvals=ApprovalService(
            store,
            retry_window=config.settings.retry_window,
            keep_arguments=config.settings.audit_arguments,
        )
        if config is not None
        else ApprovalService(store),
        audit=AuditService(store, config.settings if config is not None else None),
        policy=policy,
        backup=BackupService(store),
        keys=KeyService(store, config),
        reloads=ReloadService(store),
        sign_in_handoffs=SignInHandoffs(store),
        listing=ListingService(
            store, catalog, annotator, toolsets=toolsets, hints=hints, policy=policy, costs=counted
        ),
        costs=counted,
    )


__all__ = ["Services", "build_services"]

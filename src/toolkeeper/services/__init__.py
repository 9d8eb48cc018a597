"""The service layer: every operation a person can do, once, for the MCP, CLI and web faces.

`Services` is the one place the services are wired together: the gateway builds them
over its live catalog, the CLI over the store alone (no catalog: offline) or takes the running
gateway's.

Each service is made, and its module imported, when it is first used: a command that reads the
approvals does without the catalog's checks and the SDK that other services bring. Importing one
service's module (`toolkeeper.services.approvals`) runs this package's module first, so nothing
else is imported here at the top.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import cached_property
from typing import TYPE_CHECKING

if TYPE_CHECKING:
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


def _offline() -> Catalog | None:
    return None


def _uncounted() -> ListingCosts | None:
    return None


class Services:
    """The services over one store, each made once, when first used. Without `catalog` they work
    offline: operations that need the servers say so; without `costs` (the current listings')
    no token costs are shown; without `resolver` rules cannot be tested; `on_change` hears of
    every write (the gateway rebuilds its listing); without `config` the policy has the default
    settings and no configured confirm modes, late approvals the default retry window, and the
    servers a client key names are not checked."""

    def __init__(
        self,
        store: Store,
        *,
        annotator: Callable[[], Annotator],
        catalog: Callable[[], Catalog | None] = _offline,
        costs: Callable[[], ListingCosts | None] = _uncounted,
        resolver: Resolver | None = None,
        on_change: Callable[[Change], Awaitable[None]] | None = None,
        config: Config | None = None,
    ) -> None:
        self._store = store
        self._annotator = annotator
        self._catalog = catalog
        self._costs = costs
        self._resolver = resolver
        self._on_change = on_change
        self._config = config

    @cached_property
    def costs(self) -> CostService:
        from toolkeeper.services.costs import CostService

        return CostService(self._costs)

    @cached_property
    def toolsets(self) -> ToolsetService:
        from toolkeeper.services.toolsets import ToolsetService

        return ToolsetService(self._store, self._catalog, self._on_change, costs=self.costs)

    @cached_property
    def hints(self) -> HintService:
        from toolkeeper.services.hints import HintService

        return HintService(self._store, self._catalog, self._annotator, self._on_change)

    @cached_property
    def policy(self) -> PolicyService:
        from toolkeeper.services.policy import PolicyService

        return PolicyService(
            self._store, self._catalog, self._annotator, self._resolver, self._config, self._on_change
        )

    @cached_property
    def rules(self) -> RuleService:
        from toolkeeper.services.rules import RuleService

        return RuleService(self._store, self._catalog, self._resolver, self._on_change)

    @cached_property
    def approvals(self) -> ApprovalService:
        from toolkeeper.services.approvals import ApprovalService

        if self._config is None:
            return ApprovalService(self._store)
        settings = self._config.settings
        return ApprovalService(
            self._store, retry_window=settings.retry_window, keep_arguments=settings.audit_arguments
        )

    @cached_property
    def audit(self) -> AuditService:
        from toolkeeper.services.audit import AuditService

        return AuditService(self._store, self._config.settings if self._config is not None else None)

    @cached_property
    def backup(self) -> BackupService:
        from toolkeeper.services.backup import BackupService

        return BackupService(self._store)

    @cached_property
    def keys(self) -> KeyService:
        from toolkeeper.services.keys import KeyService

        return KeyService(self._store, self._config)

    @cached_property
    def reloads(self) -> ReloadService:
        from toolkeeper.services.reloads import ReloadService

        return ReloadService(self._store)

    @cached_property
    def sign_in_handoffs(self) -> SignInHandoffs:
        from toolkeeper.services.signin import SignInHandoffs

        return SignInHandoffs(self._store)

    @cached_property
    def listing(self) -> ListingService:
        from toolkeeper.services.listing import ListingService

        return ListingService(
            self._store,
            self._catalog,
            self._annotator,
            toolsets=self.toolsets,
            hints=self.hints,
            policy=self.policy,
            costs=self.costs,
        )


__all__ = ["Services"]

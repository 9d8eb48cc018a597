"""Every tool of the live catalog as a person looks through it: filtered, grouped by risk, paged,
and acted on in bulk. The dashboard's tools page and `GET /api/tools` are thin faces over this.

A listing is computed per request in one pass over the catalog: the effective hints of every
tool (which the risk filter and the group counts need), then the policy's answers and the hint
suggestions for the page's tools only, so a page of 100 costs the same with 20 or 2,000 tools
behind it.

The risk groups are the seed's Option C: safe is read-only; destructive is destructive and not
read-only; modifying is everything else. They follow the effective hints, as the badges do.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any, TypeVar

from toolkeeper.annotations.effective import Annotator, EffectiveHints
from toolkeeper.annotations.hints import HINTS, field_name, is_text
from toolkeeper.catalog import Catalog, CatalogTool
from toolkeeper.errors import ErrorKind, ServiceError
from toolkeeper.policy.model import ConfirmMode
from toolkeeper.services.costs import CostService, ListingCosts, summary
from toolkeeper.services.hints import HintService, brief
from toolkeeper.services.policy import PolicyService
from toolkeeper.services.toolsets import NOT_STARTED, ToolsetService
from toolkeeper.store import Store
from toolkeeper.store import overrides as pins_rows
from toolkeeper.store import toolsets as toolset_rows
from toolkeeper.toolsets.model import Toolset, ToolStatus, find_tool, status_of

PAGE_DEFAULT = 100
PAGE_MAX = 500
TEXT_MAX = 200
BULK_MAX = 1000
# A confirm mode or hint set back to what it would be without the person's setting.
INHERIT = "inherit"


_Choice = TypeVar("_Choice", bound=StrEnum)


class ListingError(ServiceError):
    """A listing or bulk request that cannot be done."""


class Risk(StrEnum):
    SAFE = "safe"
    MODIFYING = "modifying"
    DESTRUCTIVE = "destructive"


RISK_ORDER = {risk: i for i, risk in enumerate(Risk)}


class View(StrEnum):
    LIST = "list"  # by name
    # Option C: safe, then modifying, then destructive, by name within each; a page holds the
    # same stretch (offset, limit) of each group.
    GROUPS = "groups"


class BulkAction(StrEnum):
    ADD_TO_TOOLSET = "add-to-toolset"
    CONFIRM = "confirm"
    PIN = "pin"


def risk_of(effective: EffectiveHints) -> Risk:
    if effective.fields["readOnlyHint"].value is True:
        return Risk.SAFE
    if effective.fields["destructiveHint"].value is True:
        return Risk.DESTRUCTIVE
    return Risk.MODIFYING


@dataclass(frozen=True)
class ToolQuery:
    """Which tools, in which order, which page. Made by `parse` from what a person typed."""

    server: str | None = None
    text: str | None = None
    risk: Risk | None = None
    view: View = View.LIST
    offset: int = 0
    limit: int = PAGE_DEFAULT

    @classmethod
    def parse(
        cls,
        *,
        server: Any = None,
        text: Any = None,
        risk: Any = None,
        view: Any = None,
        offset: Any = None,
        limit: Any = None,
    ) -> ToolQuery:
        """Empty values mean "no filter"; numbers may come as text (a query string)."""
        return cls(
            server=_optional_text("server", server),
            text=_optional_text("text", text),
            risk=_choice("risk", Risk, risk),
            view=_choice("view", View, view) or View.LIST,
            offset=_whole_number("offset", offset, 0, None, 0),
            limit=_whole_number("limit", limit, 1, PAGE_MAX, PAGE_DEFAULT),
        )

    def as_params(self) -> dict[str, str]:
        """The filters as query parameters (the defaults left out): what a pager link keeps."""
        params = {"server": self.server or "", "q": self.text or "", "risk": self.risk or ""}
        if self.view is not View.LIST:
            params["view"] = self.view.value
        if self.limit != PAGE_DEFAULT:
            params["limit"] = str(self.limit)
        return {k: v for k, v in params.items() if v}


def _optional_text(name: str, value: Any) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ListingError(f"{name} is a text, got {value!r}.")
    if len(value) > TEXT_MAX:
        raise ListingError(f"{name} is {len(value)} characters; the limit is {TEXT_MAX}.")
    return value.strip() or None


def _choice(name: str, kind: type[_Choice], value: Any) -> _Choice | None:
    if value is None or value == "":
        return None
    try:
        return kind(value)
    except ValueError:
        choices = ", ".join(member.value for member in kind)
        raise ListingError(f"{name} is one of {choices}; got {value!r}.") from None


def _whole_number(name: str, value: Any, least: int, most: int | None, default: int) -> int:
    if value is None or value == "":
        return default
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if not isinstance(value, int) or isinstance(value, bool) or value < least or (most and value > most):
        span = f"{least} to {most}" if most else f"{least} or more"
        raise ListingError(f"{name} is a whole number, {span}; got {value!r}.")
    return value


@dataclass(frozen=True)
class _Found:
    tool: CatalogTool
    effective: EffectiveHints
    risk: Risk


class ListingService:
    def __init__(
        self,
        store: Store,
        catalog: Callable[[], Catalog | None],
        annotator: Callable[[], Annotator],
        *,
        toolsets: ToolsetService,
        hints: HintService,
        policy: PolicyService,
        costs: CostService | None = None,
    ) -> None:
        self.store = store
        self._costs = costs or CostService()
        self._catalog = catalog
        self._annotator = annotator
        self._toolsets = toolsets
        self._hints = hints
        self._policy = policy

    def _live(self) -> Catalog:
        catalog = self._catalog()
        if catalog is None:
            raise ListingError(NOT_STARTED, ErrorKind.UNAVAILABLE)
        return catalog

    # -- reading ---------------------------------------------------------------------------

    async def tools(self, query: ToolQuery) -> dict[str, Any]:
        """One page of the tools that pass the query's filters, each with its effective hints
        and their sources, its risk group, its confirm mode, what the policy decides for a call
        with no arguments, and whether the equipped toolset holds it changed. `counts` gives
        each risk group's size under the server and text filters (the risk filter aside);
        `pagedOver` how far the offset runs (the total, or in the groups view the largest group).
        Each tool's `tokens` are its definition's as clients get it now; `costs` has the totals."""
        catalog = self._live()
        async with self.store.read() as conn:
            overrides = await pins_rows.load(conn)
            equipped_name = await toolset_rows.get_equipped(conn)
            equipped = await toolset_rows.load(conn, equipped_name) if equipped_name else None
        annotator = replace(self._annotator(), overrides=overrides)
        servers = sorted({tool.server for tool in catalog.tools})
        if query.server is not None and query.server not in servers:
            known = ", ".join(servers) or "none"
            raise ListingError(f"No connected server is named {query.server!r}; the servers are: {known}.")
        found, counts = _filtered(catalog.tools, annotator, equipped_name, query)
        page, paged_over = _page(found, query)
        facts = await self._policy.listing_facts([f.tool for f in page])
        costs = await self._costs.current()
        return {
            "tools": [
                _entry(f, annotator, equipped, catalog, facts[f.tool.namespaced_name], costs) for f in page
            ],
            "total": len(found),
            "offset": query.offset,
            "limit": query.limit,
            "pagedOver": paged_over,
            "counts": counts,
            "servers": servers,
            "toolset": equipped_name,
            **({"costs": summary(costs)} if costs is not None else {}),
        }

    # -- acting on a selection -------------------------------------------------------------

    async def bulk(
        self,
        action: Any,
        tools: Any,
        options: Mapping[str, Any] | None = None,
        *,
        by_person: bool,
    ) -> dict[str, Any]:
        """Add the tools to a toolset (`options`: toolset), set their confirm mode (mode, or
        'inherit' to clear it), or pin one hint (hint, value true/false, or 'inherit' to clear).
        The input is checked in full first; then each tool is changed on its own, and one that
        cannot be is reported with its reason while the others go ahead."""
        chosen = _choice("action", BulkAction, action)
        if chosen is None:
            raise ListingError(f"Choose an action: {', '.join(a.value for a in BulkAction)}.")
        names = _tool_names(tools)
        options = options or {}
        if chosen is BulkAction.ADD_TO_TOOLSET:
            return await self._add_to_toolset(names, options.get("toolset"), by_person=by_person)
        if chosen is BulkAction.CONFIRM:
            mode = _confirm_choice(options.get("mode"))
            outcome = await self._policy.set_confirm_modes(
                names, mode.value if mode else None, by_person=by_person
            )
            return _summed(chosen, outcome, {"mode": mode.value if mode else INHERIT})
        hint, value = _pin_choice(options.get("hint"), options.get("value"))
        outcome = await self._hints.pin_many(names, {hint: value}, by_person=by_person)
        return _summed(chosen, outcome, {"hint": hint, "value": INHERIT if value is None else value})

    async def _add_to_toolset(self, names: list[str], toolset: Any, *, by_person: bool) -> dict[str, Any]:
        if not is_text(toolset):
            raise ListingError("Choose the toolset to add the tools to.")
        done = await self._toolsets.add_tools(toolset, names, by_person=by_person)
        added, already = done["added"], done["alreadyIn"]
        message = f'Added {len(added)} tool(s) to toolset "{toolset}".'
        if already:
            message += f" {len(already)} were in it already."
        return {
            "action": BulkAction.ADD_TO_TOOLSET.value,
            "toolset": toolset,
            "done": names,  # every tool is in the toolset now (or none is, and this was refused)
            "added": added,
            "alreadyIn": already,
            "errors": [],
            "message": message,
        }


def _filtered(
    tools: Sequence[CatalogTool], annotator: Annotator, toolset: str | None, query: ToolQuery
) -> tuple[list[_Found], dict[str, int]]:
    """The tools that pass the filters, in the query's order, and the size of each risk group
    under the server and text filters."""
    needle = query.text.casefold() if query.text else None
    counts = dict.fromkeys(Risk, 0)
    found: list[_Found] = []
    for tool in tools:
        if query.server is not None and tool.server != query.server:
            continue
        effective = annotator.effective(tool, toolset, explain=False)
        if needle is not None and not _mentions(tool, effective, needle):
            continue
        risk = risk_of(effective)
        counts[risk] += 1
        if query.risk is None or risk is query.risk:
            found.append(_Found(tool, effective, risk))
    found.sort(key=lambda f: (RISK_ORDER[f.risk], f.tool.exposed_name.casefold()))
    if query.view is View.LIST:
        found.sort(key=lambda f: f.tool.exposed_name.casefold())
    return found, {risk.value: count for risk, count in counts.items()}


def _page(found: list[_Found], query: ToolQuery) -> tuple[list[_Found], int]:
    """The query's page, and how many places its offset runs over. In the groups view the
    offset and limit apply within each group, so every page shows each group's next tools."""
    window = slice(query.offset, query.offset + query.limit)
    if query.view is View.LIST:
        return found[window], len(found)
    groups: dict[Risk, list[_Found]] = {risk: [] for risk in Risk}
    for entry in found:  # in risk order already
        groups[entry.risk].append(entry)
    page = [entry for members in groups.values() for entry in members[window]]
    return page, max(len(members) for members in groups.values())


def _mentions(tool: CatalogTool, effective: EffectiveHints, needle: str) -> bool:
    title = effective.fields["title"].value
    description = tool.declared.get("description")
    return any(
        isinstance(text, str) and needle in text.casefold()
        for text in (tool.exposed_name, tool.namespaced_name, title, description)
    )


def _entry(
    found: _Found,
    annotator: Annotator,
    equipped: Toolset | None,
    catalog: Catalog,
    facts: Mapping[str, Any],
    costs: ListingCosts | None,
) -> dict[str, Any]:
    tool = found.tool
    title = found.effective.fields["title"].value
    description = tool.declared.get("description")
    status = _status_in(tool, equipped, catalog)
    # The page's tools only: inference for the suggestions shown beside a default.
    explained = annotator.effective(tool, equipped.name if equipped else None)
    return {
        "exposedName": tool.exposed_name,
        "namespacedName": tool.namespaced_name,
        "server": tool.server,
        "title": title if isinstance(title, str) else None,
        "description": description if isinstance(description, str) else None,
        "available": tool.available,
        # Why no client is sent it (catalog/check.py), or None.
        "leftOut": tool.problem,
        "inToolset": status is not None,
        "changed": status is ToolStatus.CHANGED,
        "risk": found.risk.value,
        "hints": brief(explained),
        **({"tokens": costs.of_tool(tool)} if costs is not None else {}),
        **facts,
    }


def _status_in(tool: CatalogTool, toolset: Toolset | None, catalog: Catalog) -> ToolStatus | None:
    """The tool's status in the equipped toolset (changed: its schema changed since it was
    added), or None when the toolset does not hold it."""
    if toolset is None:
        return None
    for ref in toolset.tools:
        if find_tool(ref, catalog) is tool:
            return status_of(ref, catalog)[1]
    return None


def _tool_names(tools: Any) -> list[str]:
    if not isinstance(tools, list) or not tools:
        raise ListingError("Select at least one tool.")
    if len(tools) > BULK_MAX:
        raise ListingError(f"{len(tools)} tools are selected; at most {BULK_MAX} can be changed at once.")
    bad = [t for t in tools if not is_text(t)]
    if bad:
        raise ListingError(f"Tools are given by name; got {bad[0]!r}.")
    return list(dict.fromkeys(tools))


def _confirm_choice(mode: Any) -> ConfirmMode | None:
    if mode == INHERIT:
        return None
    try:
        return ConfirmMode(mode)
    except ValueError:
        choices = ", ".join([*(m.value for m in ConfirmMode), INHERIT])
        raise ListingError(f"A confirm mode is one of {choices}; got {mode!r}.") from None


def _pin_choice(hint: Any, value: Any) -> tuple[str, bool | None]:
    name = field_name(hint) if isinstance(hint, str) else None
    if name not in HINTS:
        raise ListingError(f"Choose the hint to pin: one of {', '.join(HINTS)}; got {hint!r}.")
    assert name is not None
    choices: dict[Any, bool | None] = {True: True, False: False, "true": True, "false": False, INHERIT: None}
    if isinstance(value, bool) or value in choices:
        return name, choices[value]
    raise ListingError(f"A pinned hint is true, false or {INHERIT} (to clear the pin); got {value!r}.")


def _summed(action: BulkAction, outcome: Mapping[str, Any], detail: Mapping[str, Any]) -> dict[str, Any]:
    """A bulk change's outcome with its summary. When no tool could be changed the request is
    refused, with every tool's reason."""
    done, errors = outcome["done"], outcome["errors"]
    if not done:
        reasons = "\n".join(f"{e['tool']}: {e['message']}" for e in errors)
        raise ListingError(f"No tool was changed.\n{reasons}", ErrorKind(errors[0]["kind"]))
    message = f"Changed {len(done)} tool(s)."
    if errors:
        message += f" {len(errors)} could not be changed."
    return {"action": action.value, **detail, **outcome, "message": message}

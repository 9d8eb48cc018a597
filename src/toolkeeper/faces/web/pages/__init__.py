"""The dashboard's pages: one module per page, each with its `ROUTES`."""

from __future__ import annotations

from starlette.routing import BaseRoute

from toolkeeper.faces.web.pages import approvals, audit, overview, signin, tool, tools, toolsets


def routes() -> list[BaseRoute]:
    return [
        *overview.ROUTES,
        *signin.ROUTES,
        *tools.ROUTES,
        *toolsets.ROUTES,
        *approvals.ROUTES,
        *audit.ROUTES,
        *tool.ROUTES,
    ]

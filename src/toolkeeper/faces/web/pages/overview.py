"""The overview: servers, toolsets and waiting approvals at a glance; the theme switch."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from toolkeeper.faces.web.face import face_of, render
from toolkeeper.services.inspect import server_rows

THEMES = ("auto", "light", "dark")


async def overview(request: Request) -> Response:
    face = face_of(request)
    return render(
        request,
        "overview.html",
        {
            "servers": server_rows(face.gateway),
            "toolsets": (await face.services.toolsets.saved()).get("toolsets", []),
            "waiting": (await face.services.approvals.page()).get("calls", []),
        },
    )


async def theme(request: Request) -> Response:
    """Light, dark or the system's: kept in a cookie, so it works with scripts off."""
    form = await request.form()
    chosen = str(form.get("theme", "auto"))
    back = str(form.get("back", "/"))
    response = RedirectResponse(back if back.startswith("/") and not back.startswith("//") else "/", 303)
    response.set_cookie("theme", chosen if chosen in THEMES else "auto", samesite="strict", path="/")
    return response


ROUTES: list[BaseRoute] = [
    Route("/", overview, name="overview"),
    Route("/theme", theme, methods=["POST"], name="theme"),
]

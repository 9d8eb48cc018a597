"""The overview: servers (with a reconnect button, and for a remote server that asks, its sign-in
and a button to sign in or out), toolsets and waiting approvals at a glance; the theme switch."""

from __future__ import annotations

from collections import Counter
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from toolkeeper.faces.web.face import face_of, render
from toolkeeper.services.inspect import server_rows
from toolkeeper.services.servers import reconnect_server
from toolkeeper.services.signin import NEEDS_SIGN_IN, AccountState, SignInState

THEMES = ("auto", "light", "dark")
# How many waiting calls the overview names; the inbox has them all.
WAITING_SHOWN = 5


# The order states are counted in above the servers: serving first, then what needs a person.
COUNTED_STATES = (
    "ready",
    "loading",
    "starting",
    "connecting",
    NEEDS_SIGN_IN,
    "reconnecting",
    "stopped",
    "invalid",
    "disabled",
)


def shown_state(row: dict[str, Any], sign_in: AccountState | None) -> str:
    """A server's state as the overview shows and counts it: "needs sign-in" where its account
    (the gateway's, or the local user's) needs one, "connecting" once signed in while its
    connection is not back yet (the state and error of before are stale), else its connection's."""
    if sign_in is not None and sign_in.state is SignInState.NEEDS_SIGN_IN:
        return NEEDS_SIGN_IN
    if sign_in is not None and sign_in.state is SignInState.SIGNED_IN and row["state"] == NEEDS_SIGN_IN:
        return "connecting"
    return str(row["state"])


def state_counts(shown: list[str]) -> list[tuple[str, int]]:
    """How many servers are in each state shown, in `COUNTED_STATES`' order (any other last)."""
    counted = Counter(shown)
    order = [*COUNTED_STATES, *sorted(set(counted) - set(COUNTED_STATES))]
    return [(state, counted[state]) for state in order if counted[state]]


async def overview(request: Request) -> Response:
    face = face_of(request)
    waiting = await face.services.approvals.page(limit=WAITING_SHOWN)
    reconnecting = request.query_params.get("reconnecting")
    sign_ins = {state.server: state for state in face.sign_in.states()}
    servers = [
        {**row, "shownState": shown_state(row, sign_ins.get(row["name"]))}
        for row in server_rows(face.gateway)
    ]
    return render(
        request,
        "overview.html",
        {
            "servers": servers,
            "state_counts": state_counts([row["shownState"] for row in servers]),
            "toolsets": (await face.services.toolsets.saved()).get("toolsets", []),
            "costs": await face.services.costs.summary(),
            "waiting": waiting["calls"],
            "waiting_total": waiting["total"],
            "reconnecting": reconnecting if reconnecting in {d.name for d in face.gateway.pool} else None,
            "sign_ins": sign_ins,
            "flash": face.flashes.take(request.query_params.get("flash")),
        },
    )


async def reconnect(request: Request) -> Response:
    """Reconnect one server now, then back to the overview, which says so."""
    name = request.path_params["name"]
    reconnect_server(face_of(request).gateway, name)
    return RedirectResponse("/?" + urlencode({"reconnecting": name}), status_code=303)


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
    Route("/servers/{name}/reconnect", reconnect, methods=["POST"], name="reconnect"),
    Route("/theme", theme, methods=["POST"], name="theme"),
]

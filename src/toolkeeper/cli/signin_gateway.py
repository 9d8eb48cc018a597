"""`toolkeeper login` through a running gateway: the browser comes back to that gateway's own
`/oauth/callback` (the one address a person registers with an authorization server, for the
command and the dashboard's Sign in button alike). The command keeps the sign-in itself (its PKCE
verifier never leaves it); the gateway's callback hands the browser's answer over through the
store (store/signin_handoffs.py), and the command completes it.

Used when a gateway on this store published its dashboard's address and answers there; otherwise
`login` waits on a loopback port of its own (signin_callback.py)."""

from __future__ import annotations

import logging

import httpx2

from toolkeeper.store import Store
from toolkeeper.store.dashboard_address import published_dashboard

logger = logging.getLogger(__name__)

# A gateway that does not answer this soon is taken for gone.
ANSWER_SECONDS = 3.0
# How often the store is read for the browser's answer.
POLL_SECONDS = 0.5


async def running_dashboard(store: Store) -> str | None:
    """The address of a running gateway's dashboard on this store (ending in '/'), if one
    answers there."""
    async with store.read() as conn:
        dashboard = await published_dashboard(conn)
    if dashboard is None:
        return None
    try:
        async with httpx2.AsyncClient(timeout=ANSWER_SECONDS) as http:
            answer = await http.get(dashboard)
    except httpx2.HTTPError as exc:
        logger.debug("no gateway answers at %s (%s): signing in on a port of this command's", dashboard, exc)
        return None
    # The port may have passed to another program since the gateway stopped.
    if "toolkeeper" not in answer.text:
        logger.debug(
            "what answers at %s is no toolkeeper dashboard: signing in on a port of this command's", dashboard
        )
        return None
    return dashboard if dashboard.endswith("/") else dashboard + "/"

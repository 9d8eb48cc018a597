"""The principal the HTTP edge authenticated, where Starlette and the SDK look for a request's
user. Every way in reads it (`principal_of`) to name a request's caller, so it stands apart from
the authentication itself, whose token checks a gateway over stdio never loads."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken

from toolkeeper.pipeline.call import Principal


class PrincipalUser(AuthenticatedUser):
    """The SDK binds an HTTP session to the credential that opened it, and refuses it to any
    other."""

    def __init__(self, principal: Principal, scopes: frozenset[str] = frozenset()) -> None:
        super().__init__(
            AccessToken(
                token="",  # the token itself is never kept
                client_id=principal.client_id or principal.name,
                scopes=sorted(scopes),
                subject=principal.name,
                claims={"iss": principal.kind},
            )
        )
        self.principal = principal


def principal_of(scope: Mapping[str, Any]) -> Principal | None:
    """The principal the edge authenticated for a request (None: not an HTTP request)."""
    user = scope.get("user")
    return user.principal if isinstance(user, PrincipalUser) else None

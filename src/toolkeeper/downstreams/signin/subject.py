"""Which remote account a token names: the `sub` of a JWT, read without verifying it.

The gateway does not rely on the claim for anything but naming the account (in the audit, on the
dashboard): the server that accepts the token is the one that checks it.
"""

from __future__ import annotations

import base64
import json
from typing import Any


def jwt_subject(token: str | None) -> str | None:
    """The `sub` claim of `token` if it is a JWT whose payload names one, else None."""
    if not token or token.count(".") != 2:
        return None
    payload = token.split(".")[1]
    try:
        claims: Any = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except ValueError:
        return None
    subject = claims.get("sub") if isinstance(claims, dict) else None
    return subject if isinstance(subject, str) and subject else None


def account_subject(access_token: str, id_token: str | None) -> str | None:
    """The account an access token belongs to: its own `sub`, else the ID token's."""
    return jwt_subject(access_token) or jwt_subject(id_token)

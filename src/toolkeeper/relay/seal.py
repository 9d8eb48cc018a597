"""Sealed `requestState`: what a 2026-07-28 client carries between rounds of one call.

A modern client keeps no session, so what the gateway needs to pick a call up again (an approval
question, a downstream call waiting for the client's answers) travels in the client's retry. The
token names the client session and the call it was issued for, when it expires and a nonce, so it
holds for that client, that call and once; and the replica that issued it, which alone holds a
downstream call waiting for the answers (see edge/handover.py).

A gateway without a store signs with a key that lives only in this process (a restarted gateway
refuses old tokens: the client calls again). A gateway with a store signs with the key the store
keeps for every replica (store/request_state_key.py), so a retry that reaches another replica
behind a load balancer verifies there too.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from typing import Any


class TokenSeal:
    def __init__(self, replica: str = "") -> None:
        self._key = secrets.token_bytes(32)
        self.replica = replica  # who issues: named in every token
        self._used: dict[str, float] = {}  # nonce → expiry, kept until it expires

    def use_key(self, key: bytes) -> None:
        """Sign and verify with `key` from now on (the replicas' shared key); tokens signed before
        no longer verify."""
        self._key = key

    def issue(self, session: str, digest: str, lifetime: float, subject: str = "") -> str:
        """A token for the call `digest` of client `session`; `subject` names what the gateway
        keeps for it (read back by `subject_of`)."""
        body = json.dumps(
            {
                "s": session,
                "h": digest,
                "e": time.time() + lifetime,
                "n": secrets.token_hex(8),
                "x": subject,
                "r": self.replica,
            },
            separators=(",", ":"),
        ).encode()
        return _b64(body) + "." + _b64(self._mac(body))

    def check(self, token: str, session: str, digest: str) -> str | None:
        """None if the token is good (and now spent), else what is wrong with it."""
        claims = self._claims(token)
        if isinstance(claims, str):
            return claims
        now = time.time()
        self._used = {n: e for n, e in self._used.items() if e > now}
        if claims.get("s") != session:
            return "the request state belongs to another client"
        if claims.get("h") != digest:
            return "the request state was issued for other arguments"
        if not isinstance(claims.get("e"), int | float) or claims["e"] <= now:
            return "the request state expired"
        nonce = str(claims.get("n"))
        if nonce in self._used:
            return "the request state was already used"
        self._used[nonce] = float(claims["e"])
        return None

    def subject_of(self, token: str) -> str | None:
        """The subject of a token this gateway signed (unchecked otherwise), or None."""
        return self._claim(token, "x")

    def replica_of(self, token: str) -> str | None:
        """The replica that issued a token this gateway's key signed (unchecked otherwise), or None."""
        return self._claim(token, "r")

    def spent(self, token: str) -> tuple[str, float] | None:
        """The nonce and expiry of a token this gateway's key signed: what a store keeps once it
        is used, so that it holds once across replicas too."""
        claims = self._claims(token)
        if isinstance(claims, str) or not isinstance(claims.get("e"), int | float):
            return None
        return str(claims.get("n")), float(claims["e"])

    def _claim(self, token: str, name: str) -> str | None:
        claims = self._claims(token)
        value = claims.get(name) if isinstance(claims, dict) else None
        return value if isinstance(value, str) else None

    def _claims(self, token: str) -> dict[str, Any] | str:
        encoded, _, mac = token.partition(".")
        try:
            body = _unb64(encoded)
            good = hmac.compare_digest(_unb64(mac), self._mac(body))
            claims = json.loads(body) if good else None
        except (ValueError, json.JSONDecodeError):
            return "the request state is malformed"
        if not isinstance(claims, dict):
            return "the request state was not issued by this gateway"
        return claims

    def _mac(self, body: bytes) -> bytes:
        return hmac.new(self._key, body, hashlib.sha256).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))

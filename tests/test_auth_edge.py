"""The HTTP edge's authentication in process: what it answers and logs for each kind of bad
credential, and when the gateway may start (the throttle: test_throttle.py)."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from conftest import write_config

from toolkeeper.config.loader import load_config
from toolkeeper.edge.auth import (
    Authenticator,
    AuthPlan,
    CannotStart,
    reachable_beyond_loopback,
)
from toolkeeper.services.keys import TOKEN_START, KeyRing, token_digest
from toolkeeper.store.keys import ClientKey

pytestmark = pytest.mark.anyio

TOKEN = TOKEN_START + "A" * 43


def ring(
    *, expires_at: datetime | None = None, toolsets: tuple[str, ...] = ("dev",), admin: bool = False
) -> KeyRing:
    key = ClientKey(
        name="alice",
        prefix=TOKEN[:11],
        toolsets=toolsets,
        servers=(),
        admin=admin,
        created_at=datetime.now(UTC),
        expires_at=expires_at,
        last_used_at=None,
        token_sha256=token_digest(TOKEN),
    )
    return KeyRing([key])


class Answer:
    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []

    async def __call__(self, message: dict[str, Any]) -> None:
        self.messages.append(message)

    @property
    def status(self) -> int:
        return int(self.messages[0]["status"])

    @property
    def headers(self) -> dict[str, str]:
        return {k.decode(): v.decode() for k, v in self.messages[0]["headers"]}

    @property
    def body(self) -> dict[str, Any]:
        return dict(json.loads(self.messages[1]["body"]))


def authenticator(keys: KeyRing, *, required: bool = True) -> Authenticator:
    return Authenticator(
        AuthPlan(required=required, keys=True, oauth=None), keys=lambda: keys, resource_path="/mcp"
    )


async def admit(
    auth: Authenticator, authorization: str | None, address: str = "203.0.113.7"
) -> tuple[Any, Answer]:
    scope: dict[str, Any] = {
        "type": "http",
        "path": "/mcp",
        "method": "POST",
        "scheme": "http",
        "client": (address, 5),
    }
    headers = {"host": "gateway.example.com"}
    if authorization is not None:
        headers["authorization"] = authorization
    answer = Answer()
    return await auth.admit(scope, headers, answer), answer


async def test_a_key_admits_its_principal_and_its_use_is_remembered_for_the_store() -> None:
    auth = authenticator(ring())
    principal, answer = await admit(auth, f"Bearer {TOKEN}")
    assert answer.messages == []
    assert (principal.name, principal.kind, principal.admin, principal.toolsets) == (
        "alice",
        "key",
        False,
        ("dev",),
    )
    assert set(auth.take_key_uses()) == {"alice"}
    assert auth.take_key_uses() == {}


async def test_every_bad_credential_gets_the_same_401_and_the_log_never_holds_the_token(
    caplog: pytest.LogCaptureFixture,
) -> None:
    expired = ring(expires_at=datetime(2020, 1, 1, tzinfo=UTC))
    bodies = []
    with caplog.at_level(logging.WARNING):
        for keys, authorization in (
            (ring(), "Bearer " + TOKEN_START + "B" * 43),  # unknown
            (ring(), "Bearer " + TOKEN[:-1] + "B"),  # same prefix, wrong secret
            (expired, f"Bearer {TOKEN}"),
            (KeyRing.empty(), f"Bearer {TOKEN}"),  # revoked
            (ring(), "Bearer eyJhbGciOiJub25lIn0.e30."),  # not a key, and no OAuth here
            (ring(), f"Basic {TOKEN}"),
            (ring(), "Bearer "),
        ):
            principal, answer = await admit(authenticator(keys), authorization)
            assert principal is None and answer.status == 401
            assert 'error="invalid_token"' in answer.headers["www-authenticate"]
            bodies.append(answer.body)
    assert all(body == bodies[0] for body in bodies)
    assert "203.0.113.7" in caplog.text
    assert TOKEN[11:] not in caplog.text and "B" * 20 not in caplog.text


async def test_no_token_where_one_is_needed_names_the_metadata_and_a_long_header_is_431() -> None:
    auth = authenticator(ring())
    principal, answer = await admit(auth, None)
    assert principal is None and answer.status == 401
    assert answer.headers["www-authenticate"] == (
        'Bearer resource_metadata="http://gateway.example.com/.well-known/oauth-protected-resource/mcp"'
    )
    assert "toolkeeper keys create" in answer.body["error_description"]
    principal, answer = await admit(auth, "Bearer " + "x" * 9000)
    assert principal is None and answer.status == 431


async def test_where_no_token_is_needed_a_request_without_one_is_the_local_user() -> None:
    principal, answer = await admit(authenticator(ring(), required=False), None)
    assert answer.messages == [] and principal.name == "local" and principal.admin


@pytest.mark.parametrize(
    ("host", "allowed", "reach"),
    [
        ("127.0.0.1", [], None),
        ("localhost", ["localhost:*", "127.0.0.1:8765", "[::1]"], None),
        ("::1", [], None),
        ("0.0.0.0", [], "it listens on 0.0.0.0"),
        ("192.168.1.20", [], "it listens on 192.168.1.20"),
        ("127.0.0.1", ["gateway.example.com"], "http.allowedHosts names gateway.example.com"),
        ("127.0.0.1", ["127.0.0.1.nip.io"], "http.allowedHosts names 127.0.0.1.nip.io"),
    ],
)
def test_when_mcp_can_be_reached_beyond_this_machine(
    tmp_path: Path, host: str, allowed: list[str], reach: str | None
) -> None:
    config = load_config(write_config(tmp_path, {}, http={"allowedHosts": allowed}))
    assert reachable_beyond_loopback(config, host) == reach


def test_exposed_with_no_key_and_no_oauth_the_gateway_refuses_to_start_unless_told_none(
    tmp_path: Path,
) -> None:
    exposed = load_config(write_config(tmp_path, {}, http={"allowedHosts": ["gateway.example.com"]}))
    with pytest.raises(CannotStart, match="toolkeeper keys create NAME"):
        AuthPlan.for_serving(exposed, "127.0.0.1", KeyRing.empty())
    assert AuthPlan.for_serving(exposed, "127.0.0.1", ring()).required
    anyone = load_config(
        write_config(tmp_path, {}, http={"allowedHosts": ["gateway.example.com"], "auth": {"mode": "none"}})
    )
    assert not AuthPlan.for_serving(anyone, "0.0.0.0", KeyRing.empty()).required
    local = load_config(write_config(tmp_path, {}))
    assert not AuthPlan.for_serving(local, "127.0.0.1", KeyRing.empty()).required
    keys_only = load_config(write_config(tmp_path, {}, http={"auth": {"mode": "keys"}}))
    assert AuthPlan.for_serving(keys_only, "127.0.0.1", KeyRing.empty()).required


def test_table_cells_show_what_would_act_on_the_terminal_as_escapes() -> None:
    from rich.console import Console

    from toolkeeper.cli.common import new_table

    table = new_table("who")
    table.add_row("oauth:evil\x1b[2J\x9b\u202e\u2067 and\nnext line\tok")
    console = Console(force_terminal=False, width=80)
    with console.capture() as captured:
        console.print(table)
    shown = captured.get()
    assert "\x1b" not in shown and "\x9b" not in shown and "\u202e" not in shown and "\u2067" not in shown
    assert "oauth:evil\\u001b[2J\\u009b\\u202e\\u2067 and" in shown and "next line" in shown


async def test_a_key_is_one_principal_until_a_reload_revokes_or_changes_it() -> None:
    keys = ring()
    auth = Authenticator(
        AuthPlan(required=True, keys=True, oauth=None), keys=lambda: keys, resource_path="/mcp"
    )
    first, _ = await admit(auth, f"Bearer {TOKEN}")
    again, _ = await admit(auth, f"Bearer {TOKEN}")
    assert again is first  # made once: the lanes after the edge recognise the same caller
    wrong, answer = await admit(auth, "Bearer " + TOKEN[:-1] + "B")
    assert wrong is None and answer.status == 401  # the token is still checked every time

    keys = KeyRing.empty()  # the reload that revokes it
    revoked, answer = await admit(auth, f"Bearer {TOKEN}")
    assert revoked is None and answer.status == 401

    keys = ring(toolsets=("ops",), admin=True)
    changed, _ = await admit(auth, f"Bearer {TOKEN}")
    assert changed is not first and (changed.toolsets, changed.admin) == (("ops",), True)


async def test_a_key_admitted_before_is_refused_once_it_has_expired(monkeypatch: pytest.MonkeyPatch) -> None:
    import toolkeeper.edge.auth as auth_module

    expiry = datetime(2030, 1, 1, tzinfo=UTC)
    auth = authenticator(ring(expires_at=expiry))
    principal, _ = await admit(auth, f"Bearer {TOKEN}")
    assert principal is not None

    class Later(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> datetime:  # type: ignore[override]
            return expiry

    monkeypatch.setattr(auth_module, "datetime", Later)
    principal, answer = await admit(auth, f"Bearer {TOKEN}")
    assert principal is None and answer.status == 401

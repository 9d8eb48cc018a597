"""The gateway's own client ID metadata document, through a real gateway process
(`toolkeeper serve --transport http --ui`) with `http.publicUrl`, and a real protected server
(tests/servers/protected_mcp.py) whose authorization server takes such documents: it fetches the
gateway's, and the sign-in registers no client.

The public https address is what a reverse proxy would give the gateway; the test plays that
proxy: the authorization server fetches the document from the gateway's port, and the browser's
way back to the public callback is delivered to the gateway's port with the same query.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest
from conftest import PY, ROOT, free_port, spawn, stop, wait_port, write_config
from mcp import Client
from mcp.shared.auth import OAuthClientInformationFull
from oauth_servers import ProtectedServer, running_protected_server

pytestmark = pytest.mark.anyio

PUBLIC = "https://toolkeeper.example.test"
DOCUMENT = f"{PUBLIC}/oauth/client-metadata.json"
UI_TOKEN = "client-document-test-token"


@contextmanager
def gateway(tmp_path: Path, port: int, remote: ProtectedServer, **http: Any) -> Iterator[str]:
    config = write_config(tmp_path, {"remote": {"type": "http", "url": remote.url}}, http=http)
    command = [PY, "-m", "toolkeeper", "serve", "--transport", "http", "--ui", "--port", str(port)]
    with (tmp_path / "gateway.log").open("wb") as log:
        process = spawn(
            [*command, "--config", str(config)],
            cwd=tmp_path,
            env={"PYTHONPATH": str(ROOT / "src"), "TOOLKEEPER_UI_TOKEN": UI_TOKEN},
            stderr=log,
        )
        try:
            wait_port(port)
            yield f"http://127.0.0.1:{port}"
        finally:
            stop(process)


async def back_at_public_callback(address: str) -> str:
    """Follow the authorization server's redirects, as a browser would, to the public callback."""
    async with httpx2.AsyncClient(follow_redirects=False, timeout=30) as browser:
        answer = await browser.get(address)
        for _ in range(10):
            location = answer.headers.get("location", "")
            if location.startswith(f"{PUBLIC}/oauth/callback?"):
                return location
            assert answer.is_redirect, answer.text
            answer = await browser.get(location)
    raise AssertionError("the authorization server never sent the browser back")


async def test_the_document_is_published_and_a_sign_in_uses_it_instead_of_registering(
    tmp_path: Path,
) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    flags = ("--auto-approve", "--jwt", "--client-metadata-documents-from", base)
    with (
        running_protected_server(tmp_path, *flags) as remote,
        gateway(tmp_path, port, remote, publicUrl=PUBLIC),
    ):
        async with httpx2.AsyncClient(base_url=base, timeout=30) as http:
            # Public: no dashboard token is sent for it.
            answer = await http.get("/oauth/client-metadata.json")
            assert answer.status_code == 200, answer.text
            assert answer.headers["content-type"].startswith("application/json")
            document = answer.json()
            parsed = OAuthClientInformationFull.model_validate(document)
            assert parsed.client_id == DOCUMENT
            assert document == {
                "client_id": DOCUMENT,
                "client_name": "toolkeeper",
                "redirect_uris": [f"{PUBLIC}/oauth/callback"],
                "grant_types": ["authorization_code", "refresh_token"],
                "response_types": ["code"],
                "token_endpoint_auth_method": "none",
            }

            dashboard = {"Authorization": f"Bearer {UI_TOKEN}"}
            begun = await http.post("/api/servers/remote/sign-in", headers=dashboard, json={})
            assert begun.status_code == 201, begun.text
            authorize = parse_qs(urlsplit(begun.json()["url"]).query)
            assert authorize["client_id"] == [DOCUMENT]
            assert authorize["redirect_uri"] == [f"{PUBLIC}/oauth/callback"]

            public_callback = await back_at_public_callback(begun.json()["url"])
            # The proxy's part: the public callback reaches the gateway's port.
            done = await http.get("/oauth/callback?" + urlsplit(public_callback).query)
            assert done.status_code == 303, done.text

            [state] = (await http.get("/api/sign-ins", headers=dashboard)).json()["signIns"]
            assert state["state"] == "signed in" and state["subject"] == "alice"
            assert state["registration"] == "client_metadata_document"
        stats = remote.stats()
        assert stats["metadata_documents"] >= 1 and stats.get("registrations", 0) == 0

        async with Client(f"{base}/mcp", mode="legacy") as client:
            echoed = await client.call_tool("remote__echo", {"text": "through the document's client"})
        assert not echoed.is_error


async def test_without_a_public_https_address_no_document_is_published(
    tmp_path: Path, protected_server: ProtectedServer
) -> None:
    port = free_port()
    with gateway(tmp_path, port, protected_server) as base:
        answer = httpx2.get(f"{base}/oauth/client-metadata.json", timeout=30)
    assert answer.status_code == 404

"""`"type": "openapi"` server entries: their keys, what is refused with which message, and the
secrets they keep out of every message."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import anyio
import pytest
from rest_api import running_api, spec_document

from toolkeeper.config.loader import parse_config_text
from toolkeeper.config.model import Config
from toolkeeper.config.openapi import OpenApiConfig, OperationFilter
from toolkeeper.downstreams.base import State
from toolkeeper.downstreams.kinds import KINDS
from toolkeeper.runtime.gateway import Gateway


def parsed(entry: dict[str, Any], environ: dict[str, str] | None = None) -> Config:
    text = json.dumps({"mcpServers": {"api": {"type": "openapi", **entry}}})
    return parse_config_text(text, environ=environ or {}, kinds=KINDS.entries)


def test_every_key_is_read() -> None:
    config = parsed(
        {
            "spec": "${SPECS}/shop.yaml",
            "baseUrl": "https://api.example.com/v2/",
            "headers": {"X-Client": "${CLIENT}"},
            "auth": {"key": "SHOP_KEY", "token": "${SHOP_TOKEN}"},
            "include": {"methods": ["get", "HEAD"], "tags": ["pets"]},
            "exclude": {"operationIds": ["admin*"]},
            "timeout": 12,
            "prefix": "shop",
            "trust": "trusted",
            "openWorld": False,
            "maxResponseBytes": 2048,
        },
        {"SPECS": "/specs", "CLIENT": "tk-client", "SHOP_KEY": "secret-key-1"},
    )
    assert config.skipped == {}
    (source,) = config.servers
    assert isinstance(source, OpenApiConfig)
    assert (source.spec, source.base_url, dict(source.headers)) == (
        "/specs/shop.yaml",
        "https://api.example.com/v2",
        {"X-Client": "tk-client"},
    )
    assert [(c.scheme, c.variable, c.value) for c in source.credentials] == [
        ("key", "SHOP_KEY", "secret-key-1"),
        ("token", "SHOP_TOKEN", None),
    ]
    assert [c.scheme for c in source.missing_credentials] == ["token"]
    assert source.include == OperationFilter(methods=("GET", "HEAD"), tags=("pets",))
    assert source.exclude == OperationFilter(operation_ids=("admin*",))
    assert (source.timeout, source.prefix, source.trust) == (12.0, "shop", "trusted")
    assert (source.open_world, source.max_response_bytes) == (False, 2048)
    assert source.describe() == "openapi ${SPECS}/shop.yaml"
    # Credentials and header values never appear in a message about the server.
    assert source.redact("sent secret-key-1 as tk-client") == "sent *** as ***"


def test_the_defaults() -> None:
    (source,) = parsed({"spec": "api.json"}).servers
    assert isinstance(source, OpenApiConfig)
    assert (source.open_world, source.max_response_bytes, source.base_url) == (True, 1024 * 1024, None)
    assert (source.trust, source.prefix, source.credentials) == ("untrusted", "api", ())


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        ({}, "an openapi server needs 'spec': a file path or an http(s) URL of an OpenAPI document"),
        ({"spec": "ftp://example.com/api.json"}, "'spec' must be a file path or an http:// or https:// URL"),
        (
            {"spec": "a.json", "baseUrl": "file:///etc"},
            "'baseUrl' must start with http:// or https://, got 'file:///etc'; an openapi server sends "
            "HTTP requests only",
        ),
        ({"spec": "a.json", "openWorld": "yes"}, "'openWorld' must be true or false, got 'yes'"),
        ({"spec": "a.json", "maxResponseBytes": 0}, "'maxResponseBytes' must be a positive whole number"),
        ({"spec": "a.json", "auth": {"key": "not a name"}}, "'auth.key': 'not a name' is not an environment"),
        ({"spec": "a.json", "include": {"paths": ["/a"]}}, "'include.paths' is not known; use operationIds"),
        ({"spec": "a.json", "exclude": {"methods": ["FETCH"]}}, "'exclude.methods': 'FETCH' is not an HTTP"),
        ({"spec": "a.json", "include": {"tags": "pets"}}, "'include.tags' must be a list of strings"),
    ],
)
def test_a_bad_entry_is_skipped_with_its_reason(entry: dict[str, Any], reason: str) -> None:
    config = parsed(entry)
    assert config.servers == ()
    assert config.skipped["api"].startswith(reason), config.skipped["api"]


def test_an_unknown_key_is_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="toolkeeper")
    config = parsed({"spec": "a.json", "url": "https://example.com"})
    assert len(config.servers) == 1
    assert "server 'api': key 'url' is not used by a openapi server and is ignored" in caplog.text


@pytest.mark.anyio
async def test_a_spec_whose_server_is_not_http_is_refused(tmp_path: Path) -> None:
    with running_api() as api:
        document = spec_document(api)
    document["servers"] = [{"url": "ftp://files.example.com/api"}]
    spec = tmp_path / "ftp.json"
    spec.write_text(json.dumps(document))
    config = parsed({"spec": str(spec)})
    gateway = Gateway(config)
    async with anyio.create_task_group() as tg:
        await tg.start(gateway.run)
        await gateway.started.wait()
        source = gateway.pool["api"]
        assert source.state is State.STOPPED and source.tools == []
        assert source.last_error is not None
        assert "no http(s) server to send requests to" in source.last_error
        assert "server URL 'ftp://files.example.com/api' is not http(s)" in source.last_error
        tg.cancel_scope.cancel()

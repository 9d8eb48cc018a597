"""The configuration file: the `mcpServers` format, `${VAR}` expansion, settings, lookup, bad input."""

from __future__ import annotations

import json
import logging
import re
import socket
import sys
from pathlib import Path
from typing import Any

import pytest

from toolkeeper.config import Config, ConfigError, GatewaySettings, ServerConfig, load_config
from toolkeeper.config.loader import demo_config_path, find_config, parse_config_file, parse_config_text
from toolkeeper.config.model import SignInSettings
from toolkeeper.config.openapi import OpenApiConfig
from toolkeeper.downstreams.kinds import KINDS

NO_ENV: dict[str, str] = {}


def parse(servers: dict[str, Any], env: dict[str, str] | None = None, **top: Any) -> Config:
    return parse_config_text(
        json.dumps({"mcpServers": servers, **top}), environ=NO_ENV if env is None else env
    )


def only(config: Config) -> ServerConfig:
    assert len(config.servers) == 1, config
    return config.servers[0]


# --- the mcpServers format ---------------------------------------------------------------------


def test_stdio_entry_with_every_standard_key():
    config = parse(
        {
            "git": {
                "command": "uvx",
                "args": ["mcp-server-git", "--repo", "."],
                "env": {"A": "1"},
                "cwd": "/srv",
            }
        }
    )
    assert config.servers == (
        ServerConfig(
            name="git",
            transport="stdio",
            command="uvx",
            args=("mcp-server-git", "--repo", "."),
            env={"A": "1"},
            cwd="/srv",
            url=None,
            headers={},
            prefix="git",
            trust="untrusted",
            timeout=60.0,
        ),
    )
    assert config.skipped == {}
    assert config.disabled == ()
    assert config.path is None


def test_numbers_in_args_and_env_become_strings():
    server = only(parse({"s": {"command": "run", "args": ["--port", 8080, 1.5], "env": {"N": 3}}}))
    assert server.args == ("--port", "8080", "1.5")
    assert server.env == {"N": "3"}


@pytest.mark.parametrize(
    "entry",
    [
        {"type": "http", "url": "https://mcp.example.com/mcp"},
        {"url": "https://mcp.example.com/mcp"},
        {"type": "streamable-http", "url": "https://mcp.example.com/mcp"},
        {"type": "streamableHttp", "url": "https://mcp.example.com/mcp"},
        {"transport": "http", "url": "https://mcp.example.com/mcp"},
    ],
    ids=["type-http", "bare-url", "streamable-http", "streamableHttp", "transport-key"],
)
def test_streamable_http_entries(entry):
    server = only(parse({"remote": {**entry, "headers": {"X-Team": "a"}}}))
    assert server == ServerConfig(
        name="remote",
        transport="http",
        url="https://mcp.example.com/mcp",
        headers={"X-Team": "a"},
        prefix="remote",
        # Every remote entry signs in when its server asks, one account for the gateway.
        sign_in=SignInSettings(),
    )
    assert server.command is None and server.args == ()
    assert server.describe() == "http https://mcp.example.com/mcp"


def test_sse_entry():
    server = only(parse({"old": {"type": "sse", "url": "http://127.0.0.1:9000/sse", "headers": {"K": "v"}}}))
    assert (server.transport, server.url, server.headers) == ("sse", "http://127.0.0.1:9000/sse", {"K": "v"})
    assert server.describe() == "sse http://127.0.0.1:9000/sse"


def test_explicit_stdio_type_and_command_wins_over_url():
    assert only(parse({"s": {"type": "stdio", "command": "x"}})).transport == "stdio"
    assert only(parse({"s": {"command": "x", "url": "https://a/mcp"}})).transport == "stdio"


def test_toolkeeper_keys_prefix_trust_timeout():
    config = parse(
        {
            "a": {"command": "x", "prefix": "", "trust": "trusted", "timeout": 5},
            "b": {"command": "x", "prefix": "bee-2_B", "trust": "untrusted", "timeout": 0.25},
            "c": {"command": "x"},
        }
    )
    got = [(s.name, s.prefix, s.trust, s.timeout) for s in config.servers]
    assert got == [
        ("a", "", "trusted", 5.0),
        ("b", "bee-2_B", "untrusted", 0.25),
        ("c", "c", "untrusted", 60.0),
    ]
    assert isinstance(config.servers[0].timeout, float)


def test_protocol_era_per_server():
    config = parse({"a": {"command": "x"}, "b": {"url": "https://b/mcp", "protocol": "legacy"}})
    assert [s.protocol for s in config.servers] == ["auto", "legacy"]


def test_http_hygiene_settings_from_file_and_environment():
    http = {
        "allowedHosts": ["gw.example.com"],
        "allowedOrigins": ["https://app.example.com"],
        "maxRequestBytes": 2048,
    }
    settings = parse({}, toolkeeper={"http": http}).settings
    assert settings.http_allowed_hosts == ("gw.example.com",)
    assert settings.http_allowed_origins == ("https://app.example.com",)
    assert settings.http_max_request_bytes == 2048
    env = {
        "TOOLKEEPER_HTTP_ALLOWED_HOSTS": "a.example, b.example:8765 ",
        "TOOLKEEPER_HTTP_ALLOWED_ORIGINS": "",
    }
    settings = parse({}, env, toolkeeper={"http": http}).settings
    assert settings.http_allowed_hosts == ("a.example", "b.example:8765")
    assert settings.http_allowed_origins == ()
    assert parse({}).settings.http_max_request_bytes == 4 * 1024 * 1024


@pytest.mark.parametrize(
    ("http", "message"),
    [
        (
            {"allowedHosts": "gw.example.com"},
            "toolkeeper.http.allowedHosts must be a list of non-empty strings",
        ),
        ({"allowedOrigins": [""]}, "toolkeeper.http.allowedOrigins must be a list of non-empty strings"),
        ({"maxRequestBytes": 10}, "toolkeeper.http.maxRequestBytes must be a whole number of at least 1024"),
        ({"hosts": []}, "toolkeeper.http must look like"),
        (
            {"trustedProxies": "10.0.0.5"},
            "toolkeeper.http.trustedProxies must be a list of non-empty strings",
        ),
        (
            {"trustedProxies": ["10.0.0.5", "proxy.example"]},
            "toolkeeper.http.trustedProxies lists 'proxy.example', which is no IP address or network: "
            'write the address your reverse proxy connects from, like "10.0.0.5"',
        ),
        (
            {"publicUrl": "http://gateway.example.com"},
            "toolkeeper.http.publicUrl must use https (http only for a loopback host",
        ),
        (
            {"publicUrl": "https://gateway.example.com/?a=1"},
            "toolkeeper.http.publicUrl must not hold a query",
        ),
    ],
)
def test_bad_http_hygiene_settings(http, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse({}, toolkeeper={"http": http})


def test_trusted_proxies_are_none_by_default_and_read_as_networks_from_the_file_or_environment():
    assert parse({}).settings.http_trusted_proxies == ()
    trusted = {"http": {"trustedProxies": ["10.0.0.5", "10.1.2.3/8", "fd00::/8"]}}
    assert parse({}, toolkeeper=trusted).settings.http_trusted_proxies == (
        "10.0.0.5/32",
        "10.0.0.0/8",
        "fd00::/8",
    )
    env = {"TOOLKEEPER_HTTP_TRUSTED_PROXIES": "127.0.0.1, ::1"}
    assert parse({}, env).settings.http_trusted_proxies == ("127.0.0.1/32", "::1/128")


def test_the_public_url_is_none_by_default_and_read_from_the_file_or_environment() -> None:
    assert parse({}).settings.http_public_url is None
    public = {"http": {"publicUrl": "https://gateway.example.com/tk/"}}
    assert parse({}, toolkeeper=public).settings.http_public_url == "https://gateway.example.com/tk"
    env = {"TOOLKEEPER_HTTP_PUBLIC_URL": "https://other.example.com"}
    assert parse({}, env, toolkeeper=public).settings.http_public_url == "https://other.example.com"


def test_hint_settings_per_server_fall_back_to_the_gateways() -> None:
    config = parse_config_text(
        json.dumps(
            {
                "mcpServers": {
                    "a": {"command": "x", "inferHints": "apply", "sanitizeUntrustedHints": False},
                    "b": {"command": "x"},
                },
                "toolkeeper": {"inferHints": "suggest", "sanitizeUntrustedHints": True},
            }
        )
    )
    a, b = config.servers
    assert (a.infer_hints, a.sanitize_untrusted_hints) == ("apply", False)
    assert (b.infer_hints, b.sanitize_untrusted_hints) == (None, None)
    assert (config.settings.infer_hints, config.settings.sanitize_untrusted_hints) == ("suggest", True)
    with pytest.raises(ConfigError, match=r"toolkeeper\.inferHints must be 'suggest' or 'apply'"):
        parse_config_text('{"toolkeeper": {"inferHints": "always"}}')
    env = {"TOOLKEEPER_INFER_HINTS": "apply"}
    assert parse_config_text("{}", environ=env).settings.infer_hints == "apply"


def test_default_prefix_is_the_server_name_even_when_it_is_not_a_valid_explicit_prefix():
    # Server names may be 64 long; an explicit prefix may not. The default prefix (the name)
    # must not get the server skipped; the exposed name is shortened later.
    long_name = "n" * 64
    config = parse({"my-server": {"command": "x"}, long_name: {"command": "x"}})
    assert config.skipped == {}
    assert [(s.name, s.prefix) for s in config.servers] == [
        ("my-server", "my-server"),
        (long_name, long_name),
    ]


def test_servers_keep_file_order():
    names = ["zeta", "alpha", "mid", "beta"]
    config = parse({n: {"command": "x"} for n in names})
    assert [s.name for s in config.servers] == names


def test_disabled_entries_are_listed_not_parsed():
    config = parse(
        {
            "on": {"command": "x", "disabled": False},
            "off": {"command": "x", "disabled": True},
            "off-and-broken": {"disabled": True, "timeout": -1},
        }
    )
    assert [s.name for s in config.servers] == ["on"]
    assert config.disabled == ("off", "off-and-broken")
    assert config.skipped == {}


def test_unknown_keys_inside_an_entry_are_ignored_with_a_warning(caplog):
    caplog.set_level(logging.WARNING, logger="toolkeeper")
    server = only(parse({"s": {"command": "x", "url": "https://ignored/mcp", "autoApprove": []}}))
    assert server.url is None
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "server 's': key 'url' is not used by a stdio server and is ignored",
        "server 's': key 'autoApprove' is not used by a stdio server and is ignored",
    ]


def test_empty_file_object_means_no_servers_and_default_settings():
    config = parse_config_text("{}", environ=NO_ENV)
    assert config.servers == () and config.skipped == {} and config.disabled == ()
    assert config.settings == GatewaySettings()


# --- ${VAR} expansion ---------------------------------------------------------------------------


def test_expansion_in_every_expandable_field():
    env = {"BIN": "/opt/bin", "TOKEN": "s3cret", "HOST": "mcp.example.com", "DIR": "/work"}
    config = parse(
        {
            "local": {
                "command": "${BIN}/server",
                "args": ["--token=${TOKEN}", "${DIR}"],
                "env": {"API_TOKEN": "${TOKEN}", "MIX": "a-${DIR}-b"},
                "cwd": "${DIR}/sub",
            },
            "remote": {"url": "https://${HOST}/mcp", "headers": {"Authorization": "Bearer ${TOKEN}"}},
        },
        env,
    )
    local, remote = config.servers
    assert local.command == "/opt/bin/server"
    assert local.args == ("--token=s3cret", "/work")
    assert local.env == {"API_TOKEN": "s3cret", "MIX": "a-/work-b"}
    assert local.cwd == "/work/sub"
    assert remote.url == "https://mcp.example.com/mcp"
    assert remote.headers == {"Authorization": "Bearer s3cret"}


@pytest.mark.parametrize(
    ("template", "env", "expected"),
    [
        ("${V:-fallback}", {}, "fallback"),
        ("${V:-fallback}", {"V": ""}, "fallback"),
        ("${V:-fallback}", {"V": "set"}, "set"),
        ("${V:-}", {}, ""),
        ("${V}", {"V": ""}, ""),
        ("${V:-a b/c:d}", {}, "a b/c:d"),
        ("${A}${B:-2}${A}", {"A": "1"}, "121"),
        ("$V and $(V) and {V}", {"V": "x"}, "$V and $(V) and {V}"),
        # The value of a variable is not expanded again.
        ("${V}", {"V": "${W}", "W": "no"}, "${W}"),
    ],
)
def test_expansion_semantics(template, env, expected):
    assert only(parse({"s": {"command": "x", "args": [template]}}, env)).args == (expected,)


def test_builtin_python_variable_and_environment_override():
    assert only(parse({"s": {"command": "${TOOLKEEPER_PYTHON}"}})).command == sys.executable
    assert (
        only(parse({"s": {"command": "${TOOLKEEPER_PYTHON}"}}, {"TOOLKEEPER_PYTHON": "/py"})).command == "/py"
    )


def test_process_environment_is_used_when_none_is_given(monkeypatch):
    monkeypatch.setenv("TK_TEST_CFG_VAR", "from-os")
    config = parse_config_text('{"mcpServers": {"s": {"command": "${TK_TEST_CFG_VAR}"}}}')
    assert only(config).command == "from-os"


# --- one bad entry: skipped with a warning, the others kept ------------------------------------

UNSET = "environment variable NOPE is not set; set it or write ${NOPE:-default}"
BAD_PREFIX = "'prefix' must be at most 40 letters, digits, '_' or '-' (empty allowed)"
BAD_ENTRIES = [
    ("no-command-or-url", {"args": ["x"]}, "neither 'command' (stdio) nor 'url' (http/sse) is given"),
    ("not-an-object", ["x"], "the entry must be an object with 'command' (stdio) or 'url' (http/sse)"),
    ("null-entry", None, "the entry must be an object with 'command' (stdio) or 'url' (http/sse)"),
    ("command-int", {"command": 5}, "'command' must be a string, got int"),
    ("command-empty", {"command": ""}, "a stdio server needs a non-empty 'command'"),
    (
        "stdio-no-command",
        {"type": "stdio", "url": "https://a/mcp"},
        "a stdio server needs a non-empty 'command'",
    ),
    ("args-string", {"command": "x", "args": "--flag"}, "'args' must be a list of strings"),
    ("args-object", {"command": "x", "args": [{"a": 1}]}, "'args' must be a list of strings"),
    ("args-bool", {"command": "x", "args": [True]}, "'args' must be a list of strings"),
    ("env-list", {"command": "x", "env": ["A=1"]}, "'env' must be an object of string values"),
    ("env-empty-list", {"command": "x", "env": []}, "'env' must be an object of string values"),
    ("env-value-bool", {"command": "x", "env": {"A": True}}, "'env.A' must be a string"),
    ("env-value-null", {"command": "x", "env": {"A": None}}, "'env.A' must be a string"),
    ("cwd-list", {"command": "x", "cwd": ["/"]}, "'cwd' must be a string, got list"),
    ("url-int", {"url": 80}, "'url' must be a string, got int"),
    (
        "url-no-scheme",
        {"url": "mcp.example.com/mcp"},
        "a http server needs a 'url' starting with http:// or https://",
    ),
    (
        "http-no-url",
        {"type": "http", "command": "x"},
        "a http server needs a 'url' starting with http:// or https://",
    ),
    (
        "sse-ws-url",
        {"type": "sse", "url": "ws://a/sse"},
        "a sse server needs a 'url' starting with http:// or https://",
    ),
    (
        "headers-string",
        {"url": "https://a/mcp", "headers": "K: v"},
        "'headers' must be an object of string values",
    ),
    (
        "headers-false",
        {"url": "https://a/mcp", "headers": False},
        "'headers' must be an object of string values",
    ),
    ("headers-value", {"url": "https://a/mcp", "headers": {"K": ["v"]}}, "'headers.K' must be a string"),
    (
        "unknown-transport",
        {"type": "websocket", "url": "wss://a"},
        "unknown transport 'websocket'; use 'stdio' (with 'command') or 'http' / 'sse' (with 'url')",
    ),
    (
        "transport-list",
        {"type": ["stdio"], "command": "x"},
        "'type' must be a string such as 'stdio', 'http' or 'sse', got ['stdio']",
    ),
    ("var-command", {"command": "${NOPE}"}, "command: " + UNSET),
    ("var-args", {"command": "x", "args": ["ok", "${NOPE}"]}, "args[1]: " + UNSET),
    ("var-env", {"command": "x", "env": {"K": "${NOPE}"}}, "env.K: " + UNSET),
    ("var-cwd", {"command": "x", "cwd": "${NOPE}/d"}, "cwd: " + UNSET),
    ("var-url", {"url": "https://${NOPE}/mcp"}, "url: " + UNSET),
    (
        "var-header",
        {"url": "https://a/mcp", "headers": {"Authorization": "Bearer ${NOPE}"}},
        "headers.Authorization: " + UNSET,
    ),
    ("prefix-dot", {"command": "x", "prefix": "a.b"}, BAD_PREFIX),
    ("prefix-space", {"command": "x", "prefix": "a b"}, BAD_PREFIX),
    ("prefix-41", {"command": "x", "prefix": "p" * 41}, BAD_PREFIX),
    ("prefix-int", {"command": "x", "prefix": 7}, BAD_PREFIX),
    ("prefix-null", {"command": "x", "prefix": None}, BAD_PREFIX),
    ("trust-yes", {"command": "x", "trust": "yes"}, "'trust' must be 'trusted' or 'untrusted', got 'yes'"),
    (
        "trust-case",
        {"command": "x", "trust": "Trusted"},
        "'trust' must be 'trusted' or 'untrusted', got 'Trusted'",
    ),
    ("trust-bool", {"command": "x", "trust": True}, "'trust' must be 'trusted' or 'untrusted', got True"),
    ("timeout-zero", {"command": "x", "timeout": 0}, "'timeout' must be a positive number of seconds, got 0"),
    (
        "timeout-negative",
        {"command": "x", "timeout": -1.5},
        "'timeout' must be a positive number of seconds, got -1.5",
    ),
    (
        "timeout-string",
        {"command": "x", "timeout": "30"},
        "'timeout' must be a positive number of seconds, got '30'",
    ),
    (
        "timeout-bool",
        {"command": "x", "timeout": True},
        "'timeout' must be a positive number of seconds, got True",
    ),
    ("disabled-string", {"command": "x", "disabled": "true"}, "'disabled' must be true or false, got 'true'"),
    (
        "infer-yes",
        {"command": "x", "inferHints": "yes"},
        "'inferHints' must be 'suggest' or 'apply', got 'yes'",
    ),
    (
        "sanitize-string",
        {"command": "x", "sanitizeUntrustedHints": "true"},
        "'sanitizeUntrustedHints' must be true or false, got 'true'",
    ),
    (
        "protocol-unknown",
        {"command": "x", "protocol": "2025-06-18"},
        "'protocol' must be one of 'auto', 'legacy', '2026-07-28', got '2025-06-18' "
        "('auto' uses the newest era the server speaks)",
    ),
]


@pytest.mark.parametrize(("bad", "entry", "reason"), BAD_ENTRIES, ids=[b[0] for b in BAD_ENTRIES])
def test_one_bad_entry_is_skipped_with_a_warning_and_the_others_kept(bad, entry, reason, caplog):
    caplog.set_level(logging.WARNING, logger="toolkeeper")
    config = parse({"before": {"command": "a"}, bad: entry, "after": {"url": "https://b/mcp"}})
    assert [s.name for s in config.servers] == ["before", "after"]
    assert config.skipped == {bad: reason}
    assert config.disabled == ()
    skipped = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert skipped == [f"<config>: server {bad!r} skipped: {reason}"]
    assert all(r.levelno == logging.WARNING for r in caplog.records if "skipped" in r.getMessage())


def test_nan_timeout_is_rejected():
    # Python's json accepts NaN; a NaN timeout would never fire.
    config = parse_config_text('{"mcpServers": {"s": {"command": "x", "timeout": NaN}}}', environ=NO_ENV)
    assert config.skipped == {"s": "'timeout' must be a positive number of seconds, got nan"}


@pytest.mark.parametrize(
    "entry",
    [
        {"command": "toolkeeper", "args": ["serve"]},
        {"command": "/usr/local/bin/toolkeeper", "args": ["serve", "--config", "x.json"]},
        {"command": "${TOOLKEEPER_PYTHON}", "args": ["-m", "toolkeeper", "serve", "--transport", "stdio"]},
    ],
)
def test_an_entry_that_starts_toolkeeper_itself_is_skipped(entry):
    config = parse({"self": entry, "other": {"command": "x", "args": ["-m", "toolkeeper.demo.notes"]}})
    assert [s.name for s in config.servers] == ["other"]
    assert config.skipped == {
        "self": "this entry starts toolkeeper itself; a gateway in front of itself recurses"
    }


# '.' is refused: it separates server and tool in namespaced names, so `a.b`+`c` and `a`+`b.c`
# would both be `a.b.c`.
@pytest.mark.parametrize("name", ["has space", "slash/name", "", "x" * 65, "ünïcode", "my.server"])
def test_bad_server_names_are_skipped(name):
    config = parse({name: {"command": "x"}, "ok": {"command": "x"}})
    assert [s.name for s in config.servers] == ["ok"]
    assert config.skipped == {
        name: "server names may use letters, digits, '_' and '-', at most 64 characters"
    }


def test_skipped_warning_names_the_file(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="toolkeeper")
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"mcpServers": {"bad": {"command": 1}, "good": {"command": "x"}}}))
    config = parse_config_file(path, environ=NO_ENV)
    assert config.path == path
    assert [s.name for s in config.servers] == ["good"]
    assert [r.getMessage() for r in caplog.records] == [
        f"{path}: server 'bad' skipped: 'command' must be a string, got int"
    ]


# --- file-level problems: ConfigError naming file and line --------------------------------------


def write(tmp_path: Path, text: str | bytes) -> Path:
    path = tmp_path / "config.json"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("text", "position", "msg"),
    [
        (
            '{\n  "mcpServers": {\n    "a": {"command": "x",}\n  }\n}\n',
            "3:26",
            "Expecting property name enclosed in double quotes",
        ),
        ('{\n  "mcpServers": {\n    "a": {"command": "x"}\n  \n', "5:1", "Expecting ',' delimiter"),
        ("{\n  'mcpServers': {}\n}", "2:3", "Expecting property name enclosed in double quotes"),
        ("", "1:1", "Expecting value"),
        ('{"mcpServers": {}} extra', "1:20", "Extra data"),
    ],
    ids=["trailing-comma", "unclosed", "single-quotes", "empty-file", "extra-data"],
)
def test_invalid_json_names_file_line_and_column(tmp_path, text, position, msg):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        parse_config_file(path, environ=NO_ENV)
    assert str(caught.value) == (
        f"{path}:{position}: invalid JSON: {msg}. "
        "Fix the syntax there (a trailing comma or a missing quote is the usual cause)."
    )


def test_unknown_top_level_key_names_file_line_and_key(tmp_path):
    path = write(tmp_path, '{\n  "mcpServers": {},\n\n  "servers": {}\n}\n')
    with pytest.raises(ConfigError) as caught:
        parse_config_file(path, environ=NO_ENV)
    assert str(caught.value) == (
        f"{path}:4: unknown top-level key 'servers'. "
        "Allowed: $schema, mcpServers, toolkeeper; gateway settings go under 'toolkeeper'."
    )


def test_unknown_top_level_key_line_is_the_top_level_one_not_a_nested_namesake(tmp_path):
    # "timeout" first appears inside a server entry (line 3); the offending top-level one is on line 6.
    text = (
        '{\n  "mcpServers": {\n    "a": {"command": "x", "timeout": 5,\n'
        '          "env": {"k": "{\\"timeout\\": 1}"}}\n  },\n  "timeout": 30\n}\n'
    )
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=r":6: unknown top-level key 'timeout'\.") as caught:
        parse_config_file(path, environ=NO_ENV)
    assert str(caught.value).startswith(f"{path}:6: ")


def test_unknown_top_level_key_written_with_an_escape_still_gets_its_line():
    text = '{\n  "mcpServers": {},\n  "tool\\u006beeper2": {}\n}\n'
    with pytest.raises(ConfigError) as caught:
        parse_config_text(text, environ=NO_ENV)
    assert str(caught.value).startswith("<config>:3: unknown top-level key 'toolkeeper2'.")


def test_schema_key_is_allowed():
    config = parse_config_text('{"$schema": "https://example.com/s.json", "mcpServers": {}}', environ=NO_ENV)
    assert config.servers == ()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[]", '<config>: the top level must be a JSON object like {"mcpServers": {...}}.'),
        ('"mcpServers"', '<config>: the top level must be a JSON object like {"mcpServers": {...}}.'),
        ('{"mcpServers": []}', "<config>: 'mcpServers' must be an object mapping server names to entries."),
        ('{"mcpServers": null}', "<config>: 'mcpServers' must be an object mapping server names to entries."),
        ('{"toolkeeper": []}', "<config>: 'toolkeeper' must be an object of gateway settings."),
        (
            '{"toolkeeper": {"port": 1}}',
            "<config>: unknown setting 'toolkeeper.port'. Allowed: approvalTimeout, auditArguments, "
            "auditKey, auditMaxWaiting, auditRetentionDays, autoApproveReadOnly, "
            "clientConnectionIdleSeconds, confirm, confirmDestructive, databaseTimeout, databaseUrl, "
            "discovery, featureFlags, home, http, inferHints, logLevel, maxClientConnections, "
            "maxConcurrentConnects, maxDescriptionBytes, maxServerInstructions, "
            "maxToolTokens, rateLimits, replica, retryWindow, sanitizeUntrustedHints, stdio, "
            "trustIdempotentRetries, workingSetMaxTokens, workingSetMaxTools.",
        ),
        (
            '{"toolkeeper": {"http": {"host": "h", "bind": 1}}}',
            '<config>: toolkeeper.http must look like {"host": "127.0.0.1", "port": 8765}, with optional '
            '"allowedHosts", "allowedOrigins" and "trustedProxies" (lists of strings), "publicUrl", '
            '"replicaUrl", "maxRequestBytes" and "auth".',
        ),
        (
            '{"toolkeeper": {"featureFlags": {"x": "yes"}}}',
            "<config>: toolkeeper.featureFlags must map flag names to true/false.",
        ),
        (
            '{"toolkeeper": {"maxConcurrentConnects": 0}}',
            "<config>: toolkeeper.maxConcurrentConnects must be at least 1.",
        ),
        (
            '{"toolkeeper": {"maxConcurrentConnects": true}}',
            "<config>: toolkeeper.maxConcurrentConnects must be a int, got True.",
        ),
        ('{"toolkeeper": {"databaseUrl": 5}}', "<config>: toolkeeper.databaseUrl must be a str, got 5."),
        (
            '{"toolkeeper": {"home": "${NOPE}/tk"}}',
            "<config>: toolkeeper.home: " + UNSET,
        ),
        (
            '{"toolkeeper": {"http": {"port": 70000}}}',
            "<config>: the HTTP port must be a whole number between 1 and 65535, got 70000.",
        ),
        (
            '{"toolkeeper": {"http": {"port": null}}}',
            "<config>: the HTTP port must be a whole number between 1 and 65535, got None.",
        ),
        (
            '{"toolkeeper": {"http": {"port": [80]}}}',
            "<config>: the HTTP port must be a whole number between 1 and 65535, got [80].",
        ),
        (
            '{"toolkeeper": {"http": {"port": 80.5}}}',
            "<config>: the HTTP port must be a whole number between 1 and 65535, got 80.5.",
        ),
        ('{"toolkeeper": {"http": {"port": "web"}}}', "http port must be a int, got 'web'."),
    ],
)
def test_file_level_structure_errors(text, message):
    with pytest.raises(ConfigError) as caught:
        parse_config_text(text, environ=NO_ENV)
    assert str(caught.value) == message


def test_missing_file(tmp_path):
    path = tmp_path / "absent.json"
    with pytest.raises(ConfigError) as caught:
        parse_config_file(path)
    assert str(caught.value) == (
        f"{path}: no such file. Create it (see the README's configuration reference) "
        "or pass another file with --config."
    )


def test_directory_instead_of_file(tmp_path):
    with pytest.raises(ConfigError) as caught:
        parse_config_file(tmp_path)
    assert str(caught.value) == f"{tmp_path}: cannot be read (Is a directory). Check its permissions."


def test_file_that_is_not_utf8(tmp_path):
    path = write(tmp_path, b'{"mcpServers": {"caf\xe9": {"command": "x"}}}')
    with pytest.raises(ConfigError) as caught:
        parse_config_file(path)
    assert str(caught.value) == f"{path}: not UTF-8 text (byte 20). Save it as UTF-8."


# --- gateway settings ---------------------------------------------------------------------------


def test_settings_defaults():
    assert parse({}).settings == GatewaySettings(
        home=None,
        database_url=None,
        http_host="127.0.0.1",
        http_port=8765,
        log_level="INFO",
        max_concurrent_connects=8,
        feature_flags={},
    )


FILE_SETTINGS = {
    "home": "${BASE:-/tmp}/tk",
    "databaseUrl": "sqlite:///x.db",
    "http": {"host": "0.0.0.0", "port": 9000},
    "logLevel": "debug",
    "maxConcurrentConnects": 2,
    "featureFlags": {"beta": True, "old": False},
}


def test_settings_from_the_file():
    assert parse({}, toolkeeper=FILE_SETTINGS).settings == GatewaySettings(
        home=Path("/tmp/tk"),
        database_url="sqlite:///x.db",
        http_host="0.0.0.0",
        http_port=9000,
        log_level="DEBUG",
        max_concurrent_connects=2,
        feature_flags={"beta": True, "old": False},
    )


def test_environment_overrides_file_settings():
    env = {
        "BASE": "/data",
        "TOOLKEEPER_HOME": "${BASE}/home2",
        "TOOLKEEPER_DATABASE_URL": "postgresql://db/tk",
        "TOOLKEEPER_HTTP_HOST": "::1",
        "TOOLKEEPER_HTTP_PORT": "9100",
        "TOOLKEEPER_LOG_LEVEL": "warning",
        "TOOLKEEPER_MAX_CONCURRENT_CONNECTS": "3",
    }
    assert parse({}, env, toolkeeper=FILE_SETTINGS).settings == GatewaySettings(
        home=Path("/data/home2"),
        database_url="postgresql://db/tk",
        http_host="::1",
        http_port=9100,
        log_level="WARNING",
        max_concurrent_connects=3,
        feature_flags={"beta": True, "old": False},
    )


def test_home_expands_user():
    settings = parse({}, toolkeeper={"home": "~/tk"}).settings
    assert settings.home == Path("~/tk").expanduser()
    assert "~" not in str(settings.home)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"TOOLKEEPER_MAX_CONCURRENT_CONNECTS": "many"},
            "environment variable TOOLKEEPER_MAX_CONCURRENT_CONNECTS must be a int, got 'many'.",
        ),
        (
            {"TOOLKEEPER_MAX_CONCURRENT_CONNECTS": "0"},
            "<config>: toolkeeper.maxConcurrentConnects must be at least 1.",
        ),
        ({"TOOLKEEPER_HTTP_PORT": "80x"}, "http port must be a int, got '80x'."),
        (
            {"TOOLKEEPER_HTTP_PORT": "0"},
            "<config>: the HTTP port must be a whole number between 1 and 65535, got 0.",
        ),
    ],
)
def test_bad_environment_settings(env, message):
    with pytest.raises(ConfigError) as caught:
        parse({}, env)
    assert str(caught.value) == message


# --- where the configuration comes from ---------------------------------------------------------


@pytest.fixture
def isolated_lookup(tmp_path, monkeypatch):
    """No TOOLKEEPER_CONFIG, and a user config directory under tmp_path (empty at first)."""
    monkeypatch.delenv("TOOLKEEPER_CONFIG", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "toolkeeper" / "config.json"


def test_lookup_order(tmp_path, monkeypatch, isolated_lookup):
    user = isolated_lookup
    # Nothing configured: the bundled demo.
    path, origin = find_config(None)
    assert path == demo_config_path()
    assert origin == f"bundled demo (no --config, no TOOLKEEPER_CONFIG, no {user})"
    # A user config file beats the demo.
    user.parent.mkdir(parents=True)
    user.write_text('{"mcpServers": {}}')
    assert find_config(None) == (user, "user config directory")
    # TOOLKEEPER_CONFIG beats the user config file (it need not exist yet).
    from_env = tmp_path / "env.json"
    monkeypatch.setenv("TOOLKEEPER_CONFIG", str(from_env))
    assert find_config(None) == (from_env, "TOOLKEEPER_CONFIG")
    # --config beats everything.
    explicit = tmp_path / "explicit.json"
    assert find_config(explicit) == (explicit, "--config")
    assert find_config(str(explicit)) == (explicit, "--config")


def test_lookup_expands_user(isolated_lookup, monkeypatch):
    assert find_config("~/x.json") == (Path.home() / "x.json", "--config")
    monkeypatch.setenv("TOOLKEEPER_CONFIG", "~/y.json")
    assert find_config(None) == (Path.home() / "y.json", "TOOLKEEPER_CONFIG")


def test_empty_toolkeeper_config_variable_is_ignored(isolated_lookup, monkeypatch):
    monkeypatch.setenv("TOOLKEEPER_CONFIG", "")
    assert find_config(None)[0] == demo_config_path()


def test_load_config_follows_the_lookup(tmp_path, monkeypatch, isolated_lookup):
    first = tmp_path / "first.json"
    first.write_text('{"mcpServers": {"one": {"command": "x"}}}')
    second = tmp_path / "second.json"
    second.write_text('{"mcpServers": {"two": {"command": "x"}}}')
    monkeypatch.setenv("TOOLKEEPER_CONFIG", str(second))
    assert [s.name for s in load_config(first).servers] == ["one"]
    assert [s.name for s in load_config().servers] == ["two"]
    assert load_config().path == second


def test_bundled_demo_config_parses(isolated_lookup):
    environ = {"TOOLKEEPER_DEMO_DIR": "/demo", "TOOLKEEPER_DEMO_API": "http://127.0.0.1:9"}
    config = load_config(environ=environ, kinds=KINDS.entries)
    assert config.path == demo_config_path()
    assert config.skipped == {} and config.disabled == ()
    assert [(s.name, s.transport, s.trust, s.prefix) for s in config.servers] == [
        ("notes", "stdio", "untrusted", "notes"),
        ("files", "stdio", "trusted", "files"),
        ("bookmarks", "openapi", "untrusted", "bookmarks"),
        ("time", "stdio", "trusted", "time"),
    ]
    notes, files, bookmarks, time_server = config.servers
    assert isinstance(bookmarks, OpenApiConfig) and bookmarks.spec == "http://127.0.0.1:9/openapi.json"
    assert notes.command == sys.executable
    assert notes.args == ("-m", "toolkeeper.demo.notes", "--db", "/demo/notes.sqlite")
    assert files.args == ("-m", "toolkeeper.demo.files", "--root", "/demo/files")
    assert time_server.args == ("-m", "mcp_server_time", "--local-timezone", "UTC")


@pytest.mark.parametrize(
    ("file_flag", "environ", "expected"),
    [
        (None, {}, True),  # default: configuration mode on
        (False, {}, False),
        (False, {"TOOLKEEPER_ENABLE_CONFIG_TOOLS_MENU": "true"}, True),  # environment wins over the file
        (True, {"HYPERTOOL_ENABLE_CONFIG_TOOLS_MENU": "false"}, False),  # hypertool's variable honoured
        (
            None,
            {"TOOLKEEPER_ENABLE_CONFIG_TOOLS_MENU": "1", "HYPERTOOL_ENABLE_CONFIG_TOOLS_MENU": "false"},
            True,  # toolkeeper's own variable first
        ),
    ],
)
def test_config_tools_menu_flag_precedence(file_flag, environ, expected):
    settings = {} if file_flag is None else {"featureFlags": {"enableConfigToolsMenu": file_flag}}
    config = parse_config_text(json.dumps({"mcpServers": {}, "toolkeeper": settings}), environ=environ)
    assert config.settings.config_tools_menu is expected


def test_config_tools_menu_flag_bad_value_names_the_variable():
    with pytest.raises(ConfigError, match="TOOLKEEPER_ENABLE_CONFIG_TOOLS_MENU"):
        parse_config_text("{}", environ={"TOOLKEEPER_ENABLE_CONFIG_TOOLS_MENU": "maybe"})


@pytest.mark.parametrize(
    ("extra", "sign_in"),
    [
        ({"headers": {"Authorization": "Bearer abc"}}, None),
        ({"oauth": False}, None),
        (
            {"signIn": "perPrincipal", "oauth": {"scope": "read"}},
            SignInSettings(mode="perPrincipal", scope="read"),
        ),
        (
            {"oauth": {"grant": "client_credentials", "clientId": "svc", "clientSecret": "${SECRET}"}},
            SignInSettings(grant="client_credentials", client_id="svc", client_secret="s3cret-value"),
        ),
    ],
    ids=["own-authorization-header", "oauth-false", "per-principal", "client-credentials"],
)
def test_how_a_remote_entry_signs_in(extra, sign_in):
    text = json.dumps({"mcpServers": {"remote": {"url": "https://mcp.example.com/mcp", **extra}}})
    server = only(parse_config_text(text, environ={"SECRET": "s3cret-value"}))
    assert server.sign_in == sign_in
    if sign_in is not None and sign_in.client_secret:
        assert "s3cret-value" not in server.redact("the secret is s3cret-value")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"signIn": "everyone"}, "'signIn' must be one of 'shared', 'perPrincipal'"),
        ({"oauth": False, "signIn": "shared"}, "'signIn' needs OAuth"),
        (
            {"oauth": {"grant": "client_credentials"}},
            "client_credentials needs 'clientId' and 'clientSecret'",
        ),
        ({"oauth": {"clientID": "x"}}, "'oauth' has unknown keys 'clientID'"),
        ({"oauth": {"clientMetadataUrl": "http://x.example/doc"}}, "must be an https:// URL"),
        ({"headers": {"authorization": "Bearer x"}, "signIn": "perPrincipal"}, "does not sign in"),
        (
            {
                "signIn": "perPrincipal",
                "oauth": {"grant": "client_credentials", "clientId": "a", "clientSecret": "b"},
            },
            "client_credentials signs the gateway in",
        ),
    ],
)
def test_a_remote_entry_that_cannot_sign_in_as_written_is_skipped_with_the_reason(extra, message):
    text = json.dumps({"mcpServers": {"remote": {"url": "https://mcp.example.com/mcp", **extra}}})
    config = parse_config_text(text, environ={})
    assert config.servers == ()
    assert message in config.skipped["remote"]


def test_replica_name_defaults_to_the_host_and_is_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"mcpServers": {}}')
    monkeypatch.delenv("TOOLKEEPER_REPLICA", raising=False)
    assert load_config(path).settings.replica == socket.gethostname()
    monkeypatch.setenv("TOOLKEEPER_REPLICA", "gateway-2")
    assert load_config(path).settings.replica == "gateway-2"
    path.write_text('{"mcpServers": {}, "toolkeeper": {"replica": "a b"}}')
    monkeypatch.delenv("TOOLKEEPER_REPLICA")
    with pytest.raises(ConfigError, match=r"toolkeeper\.replica must name this replica"):
        load_config(path)


def test_replica_url_is_an_http_url_of_an_endpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "config.json"
    monkeypatch.delenv("TOOLKEEPER_HTTP_REPLICA_URL", raising=False)
    path.write_text('{"mcpServers": {}}')
    assert load_config(path).settings.http_replica_url is None
    # Replicas talk over their own network: plain http off the loopback is accepted.
    path.write_text('{"mcpServers": {}, "toolkeeper": {"http": {"replicaUrl": "http://10.0.0.5:8765/mcp"}}}')
    assert load_config(path).settings.http_replica_url == "http://10.0.0.5:8765/mcp"
    monkeypatch.setenv("TOOLKEEPER_HTTP_REPLICA_URL", "http://gw-2:8765/mcp")
    assert load_config(path).settings.http_replica_url == "http://gw-2:8765/mcp"
    monkeypatch.delenv("TOOLKEEPER_HTTP_REPLICA_URL")
    path.write_text('{"mcpServers": {}, "toolkeeper": {"http": {"replicaUrl": "gw-2:8765"}}}')
    with pytest.raises(ConfigError, match=r"toolkeeper\.http\.replicaUrl must be an absolute URL"):
        load_config(path)

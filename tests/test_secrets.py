"""Values from `${VAR}` stay out of the log and out of every reason shown about a server, even
where the text is not toolkeeper's own: the operating system's error for a missing command, a
failing server's stderr, a library's traceback."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import PY, ROOT, spawn_stdio_gateway, stop, write_config

from toolkeeper.config.loader import parse_config_text
from toolkeeper.config.model import Redactor
from toolkeeper.log import RedactSecrets, hide_in_logs

SECRETS = {
    "TK_MISSING_DIR": "/tmp/tk-missing-s3cr3t-a1",
    # Four characters: the shortest value that is hidden.
    "TK_SHORT_BIN": "/q9z",
    "TK_SCRIPT": "/tmp/tk-script-s3cr3t-b2.py",
    "TK_TOKEN": "tok-s3cr3t-c3",
}


def failing_servers() -> dict[str, Any]:
    """A command that does not exist (long and short), and a server that fails quoting its args."""
    return {
        "missing": {"command": "${TK_MISSING_DIR}/server", "args": ["--token", "${TK_TOKEN}"]},
        "short": {"command": "${TK_SHORT_BIN}"},
        # Python says which script it cannot open on its stderr, which the gateway logs.
        "failing": {"command": PY, "args": ["${TK_SCRIPT}", "--token", "${TK_TOKEN}"]},
    }


def environment(**extra: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TOOLKEEPER_")}
    home = extra.pop("home")
    return {**clean, "PYTHONPATH": str(ROOT / "src"), "TOOLKEEPER_HOME": home, **SECRETS, **extra}


def assert_hidden(text: str) -> None:
    for name, secret in SECRETS.items():
        assert secret not in text, f"{name}'s value is shown"


def test_servers_json_and_its_log_show_no_value_from_the_environment(tmp_path: Path) -> None:
    config = write_config(tmp_path, failing_servers())
    result = subprocess.run(
        [PY, "-m", "toolkeeper", "servers", "--config", str(config), "--json", "--wait", "20"],
        cwd=tmp_path,
        env=environment(home=str(tmp_path / "home"), TOOLKEEPER_LOG_LEVEL="DEBUG"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert_hidden(result.stdout)
    assert_hidden(result.stderr)
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert rows["missing"]["lastError"] == (
        "command not found: '${TK_MISSING_DIR}/server' (check 'command' and PATH)"
    )
    assert rows["short"]["lastError"] == "command not found: '${TK_SHORT_BIN}' (check 'command' and PATH)"
    assert rows["failing"]["state"] != "ready"
    assert "command not found: '${TK_SHORT_BIN}'" in result.stderr


@pytest.fixture
def serve_log(tmp_path: Path) -> Iterator[Path]:
    """A real `toolkeeper serve` over stdio with the failing servers; its stderr in a file."""
    config = write_config(tmp_path, failing_servers())
    log = tmp_path / "serve.log"
    env = environment(home=str(tmp_path / "home"), TOOLKEEPER_LOG_LEVEL="DEBUG")
    with log.open("wb") as stderr:
        gateway = spawn_stdio_gateway(config, env=env, stderr=stderr)
        try:
            yield log
        finally:
            stop(gateway)


def wait_for_lines(log: Path, *expected: str, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        text = log.read_text(errors="replace")
        if all(line in text for line in expected) or time.monotonic() > deadline:
            return text
        time.sleep(0.1)


def test_the_gateways_log_shows_no_value_from_the_environment(serve_log: Path) -> None:
    expected = (
        # The operating system's error, quoting the path it could not run (early start).
        "early start failed: [Errno 2] No such file or directory: '${TK_MISSING_DIR}/server'",
        "server 'short': command not found: '${TK_SHORT_BIN}'",
        # The server's own stderr.
        "[failing] ",
        "can't open file '${TK_SCRIPT}'",
    )
    text = wait_for_lines(serve_log, *expected)
    assert_hidden(text)
    for line in expected:
        assert line in text


@pytest.fixture
def redacting_logger() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    """A logger whose handler has the filter `setup_logging` puts on every handler."""
    output = io.StringIO()
    handler = logging.StreamHandler(output)
    handler.addFilter(RedactSecrets())
    logger = logging.getLogger("toolkeeper.tests.secrets")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield logger, output
    finally:
        logger.removeHandler(handler)
        hide_in_logs(lambda text: text)


def test_a_traceback_in_the_log_is_redacted_too(redacting_logger: tuple[logging.Logger, io.StringIO]) -> None:
    logger, output = redacting_logger
    hide_in_logs(Redactor([("tok-s3cr3t-c3", "${TK_TOKEN}")]))
    try:
        raise ValueError("bad token tok-s3cr3t-c3")
    except ValueError:
        logger.exception("while using %s", "tok-s3cr3t-c3")
    text = output.getvalue()
    assert "tok-s3cr3t-c3" not in text
    assert "while using ${TK_TOKEN}" in text
    assert "ValueError: bad token ${TK_TOKEN}" in text


def test_values_of_four_characters_and_more_are_hidden_shorter_ones_are_not() -> None:
    text = '{"mcpServers": {"s": {"command": "${A}/bin/server", "args": ["${B}", "${C}"]}}}'
    config = parse_config_text(text, environ={"A": "/opt", "B": "yes", "C": "/opt/bin/server-x"})
    line = "ran /opt/bin/server-x from /opt with yes"
    # The longer value wins where one contains the other.
    assert config.redact(line) == "ran ${C} from ${A} with yes"
    assert config.servers[0].redact(line) == "ran ${C} from ${A} with yes"


def test_a_redactor_without_secrets_changes_nothing() -> None:
    assert Redactor([])("any text, even ${THIS}") == "any text, even ${THIS}"

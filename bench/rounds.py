"""Alternating rounds of two source trees (or of interpreters) in one window: one table per figure.

    python bench/rounds.py --before-src /tmp/before/src --rounds 3 --only 1,6,9,10 -- --repeat 1 --calls 500
    python bench/rounds.py --before-src /tmp/before/src --only '' \\
        --bench 'cli={python} bench/cli_start.py --src {src} --json {json}'
    python bench/rounds.py --python 3.11=.venv/bin/python --python 3.13=venv313/bin/python --values

Per round, each side runs once: `bench/run.py` of THIS tree with `--src` set to that side's tree
(so both sides are measured by the same benchmark, and only the gateway's source differs), then
every `--bench` command. With `--python NAME=PATH` given, the sides are those interpreters instead,
each running this tree (`--after-src`). The order of the sides turns between rounds (before, after;
after, before; …), so that a drift in the machine's load does not fall on one side only. The
1-minute load average is noted before each run. Each run's full report and JSON are kept in `--out`.

A `--bench` command is a template: `{python}` (the side's interpreter), `{src}` (the side's source
tree) and `{json}` (the file to write) are replaced. The file it writes must hold
`{"metrics": {KEY: {"label": ..., "unit": ..., "figure": ..., VALUE}}}`, VALUE being one of
`"ratio"` (shown as 1.23×), `"difference"` (+583 ms, with the `"direct"` value beside it) or
`"value"` (an absolute figure in its unit): bench/run.py's `--json` is of that form.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RUN = HERE / "run.py"
THIS_SRC = HERE.parent / "src"


@dataclass(frozen=True)
class Side:
    name: str
    python: str
    src: Path


@dataclass
class Run:
    round: int
    side: str
    bench: str
    load: float
    seconds: float
    metrics: dict[str, dict[str, Any]]
    failure: str = ""


def side_order(sides: list[Side], round_index: int) -> list[Side]:
    """Round 1 in the order given, then each round the order turned by one."""
    turn = round_index % len(sides)
    return sides[turn:] + sides[:turn]


def run_once(argv: list[str], json_path: Path, report_path: Path) -> tuple[dict[str, dict[str, Any]], str]:
    """One run of a benchmark; its metrics, or the reason there are none."""
    with report_path.open("w") as report:
        done = subprocess.run(argv, stdout=report, stderr=subprocess.STDOUT, check=False)
    if not json_path.is_file():
        return {}, f"exit code {done.returncode}, no JSON written (see {report_path})"
    metrics = json.loads(json_path.read_text()).get("metrics", {})
    failure = f"exit code {done.returncode} (see {report_path})" if done.returncode else ""
    return metrics, failure


def bench_names(args: argparse.Namespace) -> list[str]:
    return ([RUN.name] if args.only else []) + list(args.bench)


def command(args: argparse.Namespace, name: str, side: Side, json_path: Path) -> list[str]:
    """A benchmark's command line for one side."""
    if name == RUN.name:
        return [
            side.python, str(RUN), "--only", args.only, "--src", str(side.src), "--json", str(json_path),
            *args.run_args,
        ]  # fmt: skip
    values = {"python": side.python, "src": str(side.src), "json": str(json_path)}
    return [word.format(**values) for word in shlex.split(args.bench[name])]


def run_rounds(args: argparse.Namespace, sides: list[Side]) -> list[Run]:
    runs: list[Run] = []
    for round_index in range(args.rounds):
        for side in side_order(sides, round_index):
            for name in bench_names(args):
                stem = f"round{round_index + 1}-{side.name}-{name.replace('.', '_')}"
                json_path = args.out / f"{stem}.json"
                json_path.unlink(missing_ok=True)
                argv = command(args, name, side, json_path)
                load = os.getloadavg()[0]
                log(f"round {round_index + 1}, {side.name}, {name} (load {load:.1f}): {shlex.join(argv)}")
                started = time.monotonic()
                metrics, failure = run_once(argv, json_path, args.out / f"{stem}.txt")
                took = time.monotonic() - started
                runs.append(Run(round_index + 1, side.name, name, load, took, metrics, failure))
                log(f"  {took:.0f} s" + (f", FAILED: {failure}" if failure else ""))
    return runs


def shown(metric: dict[str, Any], values: bool) -> str:
    """A metric's cell: its comparison with direct, or its value; with `values`, the gateway's own
    figure beside a comparison (what an interpreter's speed changes, which a ratio hides)."""
    unit = metric.get("unit", "")
    own = f" ({metric['toolkeeper']:,.0f} {unit})" if values and metric.get("toolkeeper") is not None else ""
    if metric.get("ratio") is not None:
        return f"{metric['ratio']:.2f}×{own}"
    if metric.get("difference") is not None:
        direct = f" (direct {metric['direct']:,.0f})" if metric.get("direct") is not None else ""
        return f"{metric['difference']:+,.0f} {unit}{direct}"
    if metric.get("value") is not None:
        return f"{metric['value']:,.3g} {unit}"
    return "—"


def tables(runs: list[Run], values: bool = False) -> str:
    """One markdown table per figure: a row per run (round, load, side), a column per metric."""
    figures: dict[tuple[str, Any], dict[str, str]] = {}
    for run in runs:
        for key, metric in run.metrics.items():
            figures.setdefault((run.bench, metric.get("figure")), {}).setdefault(key, metric["label"])
    out: list[str] = []
    for (bench, figure), labels in figures.items():
        out.append(f"{bench}, figure {figure}" if figure is not None else bench)
        out.append("")
        out.append("| round (load) | side | " + " | ".join(labels.values()) + " |")
        out.append("|---|---|" + "---|" * len(labels))
        for run in runs:
            if run.bench != bench:
                continue
            cells = [shown(run.metrics[key], values) if key in run.metrics else "failed" for key in labels]
            out.append(f"| {run.round} ({run.load:.1f}) | {run.side} | " + " | ".join(cells) + " |")
        out.append("")
    failures = [f"round {r.round}, {r.side}, {r.bench}: {r.failure}" for r in runs if r.failure]
    out.extend(failures)
    return "\n".join(out)


def named(text: str) -> tuple[str, str]:
    """NAME=VALUE, as --bench and --python take it."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip() or not value.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name.strip(), value


def sides_of(p: argparse.ArgumentParser, args: argparse.Namespace) -> list[Side]:
    """The sides to alternate: the interpreters given, each on --after-src; else before and after."""
    after = args.after_src.resolve()
    if args.python:
        if args.before_src is not None:
            p.error("--before-src and --python: one or the other (interpreters run --after-src)")
        if len(args.python) < 2:
            p.error("--python: give two interpreters or more, NAME=PATH each")
        sides = [Side(name, python, after) for name, python in args.python]
    elif args.before_src is None:
        p.error("--before-src is required, unless interpreters are compared with --python")
    else:
        sides = [
            Side("before", sys.executable, args.before_src.resolve()),
            Side("after", sys.executable, after),
        ]
    for side in sides:
        if not (side.src / "toolkeeper" / "__main__.py").is_file():
            p.error(f"{side.name}: {side.src}: no toolkeeper package there (expected toolkeeper/__main__.py)")
    return sides


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--before-src", type=Path, metavar="DIR", help="the 'before' side's src/")
    p.add_argument("--after-src", type=Path, default=THIS_SRC, metavar="DIR", help="the 'after' side's src/")
    p.add_argument("--rounds", type=int, default=3, help="rounds; each runs both sides once")
    p.add_argument(
        "--only", default="1,6,9,10", help="bench/run.py's figure groups ('' runs only the --bench commands)"
    )
    p.add_argument(
        "--bench",
        type=named,
        action="append",
        default=[],
        metavar="NAME=COMMAND",
        help="another benchmark to run per side: {python}, {src}, {json} are replaced",
    )
    p.add_argument(
        "--python",
        type=named,
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="compare interpreters instead of trees: each is a side, running --after-src",
    )
    p.add_argument("--values", action="store_true", help="show the gateway's own figure beside each ratio")
    p.add_argument("--out", type=Path, default=None, help="where each run's report and JSON are kept")
    p.add_argument("run_args", nargs="*", help="after '--': more options for bench/run.py")
    args = p.parse_args(argv)
    args.bench = dict(args.bench)
    sides = sides_of(p, args)
    if args.rounds < 1:
        p.error("--rounds must be >= 1")
    if not args.only and not args.bench:
        p.error("nothing to run: give --only figure groups, or --bench commands")
    args.out = args.out or Path(time.strftime("/tmp/toolkeeper-rounds-%Y%m%d-%H%M%S"))
    args.out.mkdir(parents=True, exist_ok=True)
    log(f"reports and JSON in {args.out}")
    runs = run_rounds(args, sides)
    text = tables(runs, args.values)
    (args.out / "tables.md").write_text(text + "\n")
    print(text)
    return 1 if any(r.failure for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())

"""Alternating rounds of two source trees in one window: one table per figure, ready for bench/README.md.

    python bench/rounds.py --before-src /tmp/before/src --rounds 3 --only 1,6,9,10 -- --repeat 1 --calls 500
    python bench/rounds.py --before-src /tmp/before/src --only '' \\
        --bench 'cli=python bench/cli_start.py --src {src} --json {json}'

Per round, each side runs once: `bench/run.py` of THIS tree with `--src` set to that side's tree
(so both sides are measured by the same benchmark, and only the gateway's source differs), then
every `--bench` command. The side that goes first alternates between rounds (before, after; after,
before; …), so that a drift in the machine's load does not fall on one side only. The 1-minute
load average is noted before each run. Each run's full report and JSON are kept in `--out`.

A `--bench` command is a template: `{python}` (this interpreter), `{src}` (the side's source
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
SIDES = ("before", "after")


@dataclass
class Run:
    round: int
    side: str
    bench: str
    load: float
    seconds: float
    metrics: dict[str, dict[str, Any]]
    failure: str = ""


def side_order(round_index: int) -> tuple[str, ...]:
    return SIDES if round_index % 2 == 0 else tuple(reversed(SIDES))


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


def command(args: argparse.Namespace, name: str, src: Path, json_path: Path) -> list[str]:
    """A benchmark's command line for one side."""
    if name == RUN.name:
        return [
            sys.executable, str(RUN), "--only", args.only, "--src", str(src), "--json", str(json_path),
            *args.run_args,
        ]  # fmt: skip
    values = {"python": sys.executable, "src": str(src), "json": str(json_path)}
    return [word.format(**values) for word in shlex.split(args.bench[name])]


def run_rounds(args: argparse.Namespace) -> list[Run]:
    sources = {"before": args.before_src.resolve(), "after": args.after_src.resolve()}
    runs: list[Run] = []
    for round_index in range(args.rounds):
        for side in side_order(round_index):
            for name in bench_names(args):
                stem = f"round{round_index + 1}-{side}-{name.replace('.', '_')}"
                json_path = args.out / f"{stem}.json"
                json_path.unlink(missing_ok=True)
                argv = command(args, name, sources[side], json_path)
                load = os.getloadavg()[0]
                log(f"round {round_index + 1}, {side}, {name} (load {load:.1f}): {shlex.join(argv)}")
                started = time.monotonic()
                metrics, failure = run_once(argv, json_path, args.out / f"{stem}.txt")
                took = time.monotonic() - started
                runs.append(Run(round_index + 1, side, name, load, took, metrics, failure))
                log(f"  {took:.0f} s" + (f", FAILED: {failure}" if failure else ""))
    return runs


def shown(metric: dict[str, Any]) -> str:
    unit = metric.get("unit", "")
    if metric.get("ratio") is not None:
        return f"{metric['ratio']:.2f}×"
    if metric.get("difference") is not None:
        direct = f" (direct {metric['direct']:,.0f})" if metric.get("direct") is not None else ""
        return f"{metric['difference']:+,.0f} {unit}{direct}"
    if metric.get("value") is not None:
        return f"{metric['value']:,.3g} {unit}"
    return "—"


def tables(runs: list[Run]) -> str:
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
            cells = [shown(run.metrics[key]) if key in run.metrics else "failed" for key in labels]
            out.append(f"| {run.round} ({run.load:.1f}) | {run.side} | " + " | ".join(cells) + " |")
        out.append("")
    failures = [f"round {r.round}, {r.side}, {r.bench}: {r.failure}" for r in runs if r.failure]
    out.extend(failures)
    return "\n".join(out)


def bench_entry(text: str) -> tuple[str, str]:
    name, sep, template = text.partition("=")
    if not sep or not name.strip() or not template.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=COMMAND, got {text!r}")
    return name.strip(), template


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--before-src", type=Path, required=True, metavar="DIR", help="the 'before' side's src/")
    p.add_argument("--after-src", type=Path, default=THIS_SRC, metavar="DIR", help="the 'after' side's src/")
    p.add_argument("--rounds", type=int, default=3, help="rounds; each runs both sides once")
    p.add_argument(
        "--only", default="1,6,9,10", help="bench/run.py's figure groups ('' runs only the --bench commands)"
    )
    p.add_argument(
        "--bench",
        type=bench_entry,
        action="append",
        default=[],
        metavar="NAME=COMMAND",
        help="another benchmark to run per side: {python}, {src}, {json} are replaced",
    )
    p.add_argument("--out", type=Path, default=None, help="where each run's report and JSON are kept")
    p.add_argument("run_args", nargs="*", help="after '--': more options for bench/run.py")
    args = p.parse_args(argv)
    args.bench = dict(args.bench)
    for side in SIDES:
        src = getattr(args, f"{side}_src")
        if not (src / "toolkeeper" / "__main__.py").is_file():
            p.error(f"--{side}-src {src}: no toolkeeper package there (expected toolkeeper/__main__.py)")
    if args.rounds < 1:
        p.error("--rounds must be >= 1")
    if not args.only and not args.bench:
        p.error("nothing to run: give --only figure groups, or --bench commands")
    args.out = args.out or Path(time.strftime("/tmp/toolkeeper-rounds-%Y%m%d-%H%M%S"))
    args.out.mkdir(parents=True, exist_ok=True)
    log(f"reports and JSON in {args.out}")
    runs = run_rounds(args)
    text = tables(runs)
    (args.out / "tables.md").write_text(text + "\n")
    print(text)
    return 1 if any(r.failure for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())

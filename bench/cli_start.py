"""How long the `toolkeeper` command takes to start and answer, for commands that do not run the
gateway: each command run `--runs` times in a fresh process, trees alternating run by run, and
the median wall and CPU time (user + system, the process and its children) of each.

    python bench/cli_start.py                                   # this tree alone
    python bench/cli_start.py --src before=/tmp/before/src      # this tree against another
    python bench/cli_start.py --runs 21 --json cli-start.json

Each tree gets a home of its own (a store made by a first, uncounted run of each command) and the
same configuration: one stdio server, which none of these commands starts. The ratio column is
this tree's median over the first other tree's. CPU time is what to trust on a busy machine; wall
time is what a person waits.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from compiled_tree import compile_tree

HERE = Path(__file__).resolve().parent
THIS_TREE = HERE.parent / "src"

# What a person types most often between gateway runs: help, the version, and the commands that
# only read the store.
COMMANDS: dict[str, list[str]] = {
    "--help": ["--help"],
    "--version": ["--version"],
    "tools --help": ["tools", "--help"],
    "approvals list": ["approvals", "list"],
    "audit -n 5": ["audit", "-n", "5"],
    "keys list": ["keys", "list"],
}
STORE_COMMANDS = ("approvals list", "audit -n 5", "keys list")


@dataclass
class Tree:
    label: str
    src: Path
    home: Path
    wall: dict[str, list[float]] = field(default_factory=dict)
    cpu: dict[str, list[float]] = field(default_factory=dict)


def write_config(directory: Path) -> Path:
    path = directory / "toolkeeper.json"
    server = {"command": sys.executable, "args": [str(HERE / "echo_server.py")]}
    path.write_text(json.dumps({"mcpServers": {"echo": server}}))
    return path


def run_once(tree: Tree, args: list[str], config: Path, python: str) -> tuple[float, float]:
    """Wall and CPU seconds of one run; a failing command stops the benchmark."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLKEEPER_")}
    env.update(PYTHONPATH=str(tree.src), TOOLKEEPER_HOME=str(tree.home), COLUMNS="100")
    needs_config = args[0] in {"approvals", "audit", "keys"} and "--help" not in args
    argv = [python, "-m", "toolkeeper", *args, *(["--config", str(config)] if needs_config else [])]
    started = time.perf_counter()
    process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    stderr = process.stderr.read().decode(errors="replace") if process.stderr else ""
    if process.stderr:
        process.stderr.close()
    if process.returncode != 0:
        sys.exit(
            f"{tree.label}: `toolkeeper {' '.join(args)}` exited {process.returncode}:\n{stderr[-2000:]}"
        )
    return wall, usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--src",
        action="append",
        default=[],
        metavar="LABEL=DIR",
        help="another source tree to compare with (its src/ folder); repeatable",
    )
    parser.add_argument("--runs", type=int, default=11, help="runs of each command per tree (default 11)")
    parser.add_argument("--only", help="comma-separated command names, e.g. '--help,approvals list'")
    parser.add_argument("--python", default=sys.executable, help="the interpreter to run (default: this one)")
    parser.add_argument("--json", type=Path, help="also write every run's figures here")
    options = parser.parse_args()

    commands = {name: COMMANDS[name] for name in (options.only.split(",") if options.only else COMMANDS)}
    with tempfile.TemporaryDirectory(prefix="cli-start-") as scratch:
        root = Path(scratch)
        config = write_config(root)
        named = [("this", THIS_TREE)] + [
            (label, Path(directory)) for label, _, directory in (s.partition("=") for s in options.src)
        ]
        trees = []
        for label, src in named:
            home = root / f"home-{len(trees)}"
            home.mkdir()
            trees.append(Tree(label, src.resolve(), home))
        for tree in trees:
            compile_tree(tree.src, options.python)
        for tree in trees:  # the store is made, and each command's files read once, uncounted
            for name in commands:
                run_once(tree, commands[name], config, options.python)
        for run in range(options.runs):
            for name, args in commands.items():
                # Alternating which tree goes first, so neither always follows the other.
                for tree in trees if run % 2 == 0 else list(reversed(trees)):
                    wall, cpu = run_once(tree, args, config, options.python)
                    tree.wall.setdefault(name, []).append(wall)
                    tree.cpu.setdefault(name, []).append(cpu)
            print(f"run {run + 1}/{options.runs} done", file=sys.stderr)

    report(trees, commands)
    if options.json:
        options.json.write_text(
            json.dumps({t.label: {"src": str(t.src), "wall": t.wall, "cpu": t.cpu} for t in trees}, indent=2)
        )


def report(trees: list[Tree], commands: dict[str, list[str]]) -> None:
    header = f"{'command':<16}" + "".join(f"{t.label + ' wall':>14}{t.label + ' cpu':>13}" for t in trees)
    if len(trees) > 1:
        header += f"{'wall ratio':>12}{'cpu ratio':>11}"
    print(header)
    for name in commands:
        line = f"{name:<16}"
        for tree in trees:
            line += f"{statistics.median(tree.wall[name]):>13.3f}s{statistics.median(tree.cpu[name]):>12.3f}s"
        if len(trees) > 1:
            this, other = trees[0], trees[1]
            wall = statistics.median(this.wall[name]) / statistics.median(other.wall[name])
            cpu = statistics.median(this.cpu[name]) / statistics.median(other.cpu[name])
            line += f"{wall:>11.2f}×{cpu:>10.2f}×"
        print(line)
    print(
        f"medians of {len(next(iter(trees[0].wall.values())))} runs; ratio: {trees[0].label} / "
        f"{trees[1].label if len(trees) > 1 else '-'}"
    )


if __name__ == "__main__":
    main()

"""The benchmark's own tools: bench/rounds.py alternates two source trees and tabulates what each
run reports; bench/run.py shows a start-up as a difference against direct, and refuses a --src
that holds no toolkeeper package."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from conftest import ROOT

ROUNDS = ROOT / "bench" / "rounds.py"

# A stand-in benchmark: reports a figure that tells the two trees apart, or fails for a tree
# whose name says so.
FAKE_BENCH = """
import json, sys
src, out = sys.argv[1], sys.argv[2]
if "broken" in src:
    sys.exit(3)
seconds = 0.9 if "old" in src or "old" in sys.executable else 0.2
metric = {"label": "toolkeeper --help", "unit": "s", "figure": "cli", "value": seconds}
json.dump({"metrics": {"help_s": metric}}, open(out, "w"))
"""


def source_tree(root: Path, name: str) -> Path:
    src = root / name / "src"
    (src / "toolkeeper").mkdir(parents=True)
    (src / "toolkeeper" / "__main__.py").write_text("")
    return src


def run_rounds(tmp_path: Path, *sides: str, rounds: int) -> subprocess.CompletedProcess[str]:
    fake = tmp_path / "fake_bench.py"
    fake.write_text(FAKE_BENCH)
    argv = [
        sys.executable, str(ROUNDS), *sides, "--rounds", str(rounds), "--only", "",
        "--out", str(tmp_path / "out"), "--bench", f"cli={{python}} {fake} {{src}} {{json}}",
    ]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)


def trees(before: Path, after: Path) -> tuple[str, ...]:
    return ("--before-src", str(before), "--after-src", str(after))


def sides_in_order(table: str) -> list[str]:
    rows = [line for line in table.splitlines() if line.startswith("| ") and "round" not in line]
    return [row.split(" | ")[1] for row in rows]


def test_rounds_alternate_which_side_goes_first_and_make_one_table(tmp_path: Path) -> None:
    done = run_rounds(tmp_path, *trees(source_tree(tmp_path, "old"), source_tree(tmp_path, "new")), rounds=3)

    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ") and "round" not in line]
    sides = sides_in_order(done.stdout)
    assert sides == ["before", "after", "after", "before", "before", "after"]
    assert all(
        ("0.9 s" if side == "before" else "0.2 s") in row for side, row in zip(sides, rows, strict=True)
    )
    assert "| round (load) | side | toolkeeper --help |" in done.stdout
    assert (tmp_path / "out" / "tables.md").read_text().strip() == done.stdout.strip()


def test_a_run_that_writes_no_figures_shows_as_failed(tmp_path: Path) -> None:
    done = run_rounds(
        tmp_path, *trees(source_tree(tmp_path, "broken"), source_tree(tmp_path, "new")), rounds=1
    )

    assert done.returncode == 1
    assert "| before | failed |" in done.stdout
    assert "| after | 0.2 s |" in done.stdout
    assert "round 1, before, cli: exit code 3, no JSON written" in done.stdout


def test_rounds_refuses_a_tree_without_toolkeeper(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    done = run_rounds(tmp_path, *trees(tmp_path / "empty", source_tree(tmp_path, "new")), rounds=1)

    assert done.returncode == 2
    assert "no toolkeeper package there" in done.stderr


def test_interpreters_take_turns_each_running_the_same_tree(tmp_path: Path) -> None:
    old_python = tmp_path / "old-python"
    old_python.symlink_to(sys.executable)
    pythons = ("--python", f"3.11={old_python}", "--python", f"3.12={sys.executable}")
    three = (*pythons, "--python", f"3.13={sys.executable}")
    tree = ("--after-src", str(source_tree(tmp_path, "new")))

    done = run_rounds(tmp_path, *three, *tree, rounds=3)

    assert done.returncode == 0, done.stderr
    assert sides_in_order(done.stdout) == [
        "3.11",
        "3.12",
        "3.13",
        "3.12",
        "3.13",
        "3.11",
        "3.13",
        "3.11",
        "3.12",
    ]
    assert "| 3.11 | 0.9 s |" in done.stdout and "| 3.13 | 0.2 s |" in done.stdout
    refused = run_rounds(tmp_path, *pythons, *tree, "--before-src", str(tmp_path), rounds=1)
    assert refused.returncode == 2 and "one or the other" in refused.stderr


def bench_run_module() -> ModuleType:
    # As `python bench/run.py` runs it: its own folder first on the path, for the modules beside it.
    if str(ROOT / "bench") not in sys.path:
        sys.path.insert(0, str(ROOT / "bench"))
    spec = importlib.util.spec_from_file_location("bench_run", ROOT / "bench" / "run.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_run"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_a_start_up_is_shown_as_the_difference_from_direct_and_a_call_as_a_ratio() -> None:
    bench = bench_run_module()
    runs = {
        "direct": {"connect_ms": [500.0, 600.0, 700.0], "fresh_call_p99": [1000.0]},
        "gateway": {"connect_ms": [800.0, 900.0, 4000.0], "fresh_call_p99": [1500.0]},
    }

    summary = bench.summarize(runs)

    assert summary["connect_ms"]["difference"] == 300.0
    assert "ratio" not in summary["connect_ms"]
    assert bench.compared(bench.METRICS["connect_ms"], summary["connect_ms"]) == "+300"
    assert summary["fresh_call_p99"]["ratio"] == 1.5
    assert bench.compared(bench.METRICS["fresh_call_p99"], summary["fresh_call_p99"]) == "1.50×"
    assert bench.compared(bench.METRICS["first_list_ms"], summary["first_list_ms"]) == "—"


def test_run_refuses_a_src_without_toolkeeper(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "run.py"), "--src", str(tmp_path), "--only", "10"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )

    assert done.returncode == 2
    assert "no toolkeeper package there" in done.stderr

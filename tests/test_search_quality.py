"""Tool search's quality in CI: bench/search_eval.py's evaluation over a fixed sample of its
real catalogs, served through the gateway as the bench serves them, against floors a little
below what the ranking (catalog/search.py) achieves now, so a change that ranks worse fails.

The sample is the catalogs that start fast: the npm and PyPI servers and the small OpenAPI
specs, every query written for them (both the tuning and the held-out part). Without the
servers and specs scripts/test installs into .test-deps, the test is skipped (failed in CI).
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

import pytest
from conftest import ROOT, missing_test_dependency

SAMPLE = ("everything", "filesystem", "sqlite", "time", "slack", "drive", "calendar", "notion", "spotify")
# What the ranking achieves on the sample now (each catalog alone: Recall@3 0.794, MRR 0.700; all
# in one index: 0.683, 0.610), less a little; the ranking before verb families and headlines
# achieved 0.706, 0.645 and 0.627, 0.548.
FLOORS = {
    "each alone": (0.76, 0.67),
    "one index": (0.65, 0.58),
}


def bench_module() -> ModuleType:
    path = ROOT / "bench" / "search_eval.py"
    spec = importlib.util.spec_from_file_location("search_eval", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["search_eval"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def search_eval() -> ModuleType:
    return bench_module()


def test_the_ranking_finds_the_right_tools_in_real_catalogs(search_eval: ModuleType) -> None:
    try:
        catalogs = search_eval.served_catalogs(SAMPLE)
    except search_eval.MissingDependency as missing:
        missing_test_dependency(str(missing))
    queries = [q for q in search_eval.load_queries() if q.catalog in SAMPLE]
    alone, union = search_eval.evaluate(catalogs, queries)
    tools = sum(len(entries) for entries in catalogs.values())
    achieved = {
        "each alone": search_eval.score(alone, tools),
        "one index": search_eval.score(union, tools),
    }
    misses = search_eval.misses_report(alone, union)
    for part, (recall, mrr) in FLOORS.items():
        score = achieved[part]
        assert score.recall >= recall and score.mrr >= mrr, (
            f"{part}: Recall@3 {score.recall:.3f} (floor {recall}), MRR {score.mrr:.3f} (floor {mrr}) "
            f"over {score.queries} queries; the misses:\n{misses}"
        )


def test_an_expected_tool_the_catalog_lacks_is_named(search_eval: ModuleType) -> None:
    """A server or spec that renamed a tool would lower the figures silently; the evaluation
    refuses instead, naming the query and the tool."""
    catalogs = {"time": [{"name": "time__get_current_time"}]}
    query = search_eval.Query("time", "what time is it", ("time__now",), held_out=False)
    with pytest.raises(ValueError, match=r"time: time__now \(for 'what time is it'\)"):
        search_eval.evaluate(catalogs, [query])


def test_recall_and_mrr_count_the_first_right_tool(search_eval: ModuleType) -> None:
    query = search_eval.Query
    outcomes = [
        search_eval.Outcome(query("c", "first", ("a",), False), 1, ("a",)),
        search_eval.Outcome(query("c", "third", ("a",), False), 3, ("x", "y", "a")),
        search_eval.Outcome(query("c", "fourth", ("a",), False), 4, ("x", "y", "z")),
        search_eval.Outcome(query("c", "missed", ("a",), False), None, ("x", "y", "z")),
    ]
    score = search_eval.score(outcomes, tools=10)
    assert score.recall == 0.5
    assert score.mrr == pytest.approx((1 + 1 / 3 + 1 / 4 + 0) / 4)

"""`python -m toolkeeper ARGS…`, with every SQL statement the gateway sends its store counted, and
optionally its event loop's thread profiled, for bench/signin.py.

    python bench/instrumented_gateway.py serve --config CONFIG

It writes its process id to `$BENCH_MARKS_FILE.pid` at start. Each SIGUSR1 is a mark: the
counts so far are written as JSON to `$BENCH_MARKS_FILE` (with the mark's number, so the reader
knows its mark arrived). With `$BENCH_PROFILE_FILE` set, the first
mark starts a profile of the thread that runs the event loop (the call path) and the second stops
it and writes it there (`pstats` format), so the profile holds exactly the calls between them.

Statements are counted per verb and table (`SELECT signin_tokens`, `INSERT audit_log`, …) by a
listener on every SQLAlchemy engine, which sees what the store sends whatever the driver.
"""

from __future__ import annotations

import cProfile
import json
import os
import re
import runpy
import signal
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine

FIRST_TABLE = re.compile(r"\b(?:FROM|INTO|UPDATE|TABLE)\s+\"?(\w+)", re.IGNORECASE)

statements: Counter[str] = Counter()
marks = 0
profile: cProfile.Profile | None = None


def statement_kind(statement: str) -> str:
    verb = statement.lstrip().split(None, 1)[0].upper() if statement.strip() else "?"
    table = FIRST_TABLE.search(statement)
    return f"{verb} {table.group(1) if table else '-'}"


@event.listens_for(Engine, "before_cursor_execute")
def count_statement(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
    statements[statement_kind(statement)] += 1


def mark(signum: int, frame: Any) -> None:
    global marks, profile
    marks += 1
    path = os.environ.get("BENCH_PROFILE_FILE")
    if path and marks == 1:
        profile = cProfile.Profile()
        profile.enable()
    elif path and profile is not None:
        profile.disable()
        profile.dump_stats(path)
        profile = None
    target = Path(os.environ["BENCH_MARKS_FILE"])
    partial = target.with_suffix(".partial")
    partial.write_text(json.dumps({"mark": marks, "statements": dict(statements)}))
    partial.replace(target)


def main() -> None:
    signal.signal(signal.SIGUSR1, mark)
    # The gateway runs as a child of the client's stdio transport: its id tells the bench whom to mark.
    Path(os.environ["BENCH_MARKS_FILE"] + ".pid").write_text(str(os.getpid()))
    sys.argv = ["toolkeeper", *sys.argv[1:]]
    runpy.run_module("toolkeeper", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()

"""How long the audit writer holds the event loop per batch of records: the records of `--batch`
calls are handed over (as the record stage does), then written, `--rounds` times, while a task on
the same loop wakes every half millisecond and notes the longest it woke late. That is what an
answer or a request arriving during the write waits before the loop gets to it.

    python bench/audit_stall.py                  # this tree, a SQLite store in a temporary folder
    python bench/audit_stall.py --src /tmp/old/src   # another source tree (a worktree of an older commit)

It uses only what both trees offer (`AuditWriter(store, days)`, `add`, `flush`), so a commit
before the writer's thread can be measured the same way. For finding causes; not a figure of run.py.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TICK = 0.0005  # how often the watching task asks to wake


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--src", default=str(HERE.parent / "src"), help="the source tree to measure")
    parser.add_argument("--batch", type=int, default=200, help="records per write")
    parser.add_argument("--rounds", type=int, default=30, help="writes measured")
    return parser.parse_args()


async def measure(args: argparse.Namespace) -> None:
    from toolkeeper.pipeline.audit import AuditLog
    from toolkeeper.pipeline.call import ToolCall
    from toolkeeper.store import Store
    from toolkeeper.store.audit.writer import AuditWriter

    with tempfile.TemporaryDirectory() as home:
        async with Store(f"sqlite:///{Path(home) / 'toolkeeper.db'}") as store:
            options: dict[str, Any] = {"flush_seconds": 3600}
            if "home" in AuditWriter.__init__.__code__.co_varnames:
                options["home"] = Path(home)
            writer = AuditWriter(store, 30, **options)
            stage = AuditLog(writer, keep_arguments=False)
            arguments = {"text": "hi", "path": "/a/file.txt", "options": {"depth": 3, "tags": ["a", "b"]}}

            def record(index: int) -> dict[str, Any]:
                call = ToolCall("echo__echo_0", {"name": "echo__echo_0", "arguments": arguments}, False)
                call.result = {"content": [{"type": "text", "text": str(index)}]}
                return stage.record(call)

            await writer.flush()  # the first write opens the connection (and starts the chain)
            # As a serving gateway does once up (edge/serve.py): collections walk only what calls make.
            gc.freeze()
            worst_waits: list[float] = []
            handing: list[float] = []
            for _ in range(args.rounds):
                records = [record(i) for i in range(args.batch)]
                worst = 0.0
                written = asyncio.Event()

                async def ticker(written: asyncio.Event) -> None:
                    # Wakes every TICK and notes how late it woke: what an answer arriving then waits.
                    nonlocal worst
                    while not written.is_set():
                        asked = time.perf_counter()
                        await asyncio.sleep(TICK)
                        worst = max(worst, time.perf_counter() - asked - TICK)

                task = asyncio.get_running_loop().create_task(ticker(written))
                await asyncio.sleep(0)
                started = time.perf_counter()
                for values in records:
                    writer.add(values)
                handing.append((time.perf_counter() - started) / args.batch)
                await writer.flush()
                written.set()
                await task
                worst_waits.append(worst)
            # The loop's own work for a write, without the watching task: what the loop's thread
            # spends on the records (handing over, and wherever the rows are made and written).
            # Unlike the lateness above, the machine's load hardly moves it.
            on_loop: list[float] = []
            for _ in range(args.rounds):
                records = [record(i) for i in range(args.batch)]
                started = time.thread_time()
                for values in records:
                    writer.add(values)
                await writer.flush()
                on_loop.append(time.thread_time() - started)
            if hasattr(writer, "stop"):
                await writer.stop()
    worst_waits.sort()
    print(
        f"{args.src}: per write of {args.batch} records, the loop's longest lateness: median "
        f"{statistics.median(worst_waits) * 1000:.2f} ms, "
        f"p90 {worst_waits[int(len(worst_waits) * 0.9)] * 1000:.2f} ms, "
        f"max {worst_waits[-1] * 1000:.2f} ms; handing one record over: "
        f"{statistics.median(handing) * 1e6:.1f} µs; the loop thread's CPU per write: "
        f"{statistics.median(on_loop) * 1000:.2f} ms (medians of {args.rounds} writes)"
    )


def main() -> None:
    args = parse()
    sys.path.insert(0, args.src)
    asyncio.run(measure(args))


if __name__ == "__main__":
    main()

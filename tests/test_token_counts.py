"""Token counts are remembered between processes: a gateway whose tools were counted before
never loads the tokenizer's tables (half a second of CPU, holding the interpreter)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

COUNT = """
import json, sys
from toolkeeper.catalog import tokens
entry = json.loads(sys.argv[1])
print(json.dumps({"tokens": tokens.tokens_of(entry), "loaded": tokens.loaded()}))
"""
ENTRY = {"name": "notes__create_note", "description": "Create a note.", "inputSchema": {"type": "object"}}


def count_in_a_new_process(entry: dict[str, object], counts: Path) -> dict[str, object]:
    env = {**os.environ, "TOOLKEEPER_TOKEN_COUNTS": str(counts)}
    done = subprocess.run(
        [sys.executable, "-c", COUNT, json.dumps(entry)], env=env, capture_output=True, text=True, check=True
    )
    answer: dict[str, object] = json.loads(done.stdout)
    return answer


def test_a_count_made_once_is_known_to_the_next_process_without_the_tokenizer(tmp_path: Path) -> None:
    counts = tmp_path / "counts.bin"
    first = count_in_a_new_process(ENTRY, counts)
    assert first["loaded"] is True and isinstance(first["tokens"], int) and first["tokens"] > 5
    again = count_in_a_new_process(ENTRY, counts)
    assert again == {"tokens": first["tokens"], "loaded": False}
    # Another entry is counted, with the tables.
    other = count_in_a_new_process({**ENTRY, "description": "Create a note, twice as long."}, counts)
    assert other["loaded"] is True and other["tokens"] != first["tokens"]


def test_a_torn_or_unreadable_file_costs_a_count_never_a_wrong_one(tmp_path: Path) -> None:
    counts = tmp_path / "counts.bin"
    first = count_in_a_new_process(ENTRY, counts)
    with counts.open("ab") as file:
        file.write(b"\x01\x02\x03")  # a record torn by a process that died writing it
    assert count_in_a_new_process(ENTRY, counts) == {"tokens": first["tokens"], "loaded": False}
    folder = tmp_path / "not-a-file"
    folder.mkdir()
    assert count_in_a_new_process(ENTRY, folder) == {"tokens": first["tokens"], "loaded": True}

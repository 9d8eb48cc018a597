"""The commands that do not run the gateway start without loading it: `toolkeeper --help` and the
commands that only read the store import neither the SDK nor the server stack (which take most
of a second), so a person typing `toolkeeper approvals list` does not wait for them. Each command
runs in a fresh process that reports the modules it ended with."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from conftest import PY, ROOT, write_config

from toolkeeper.cli.app import COMMAND_MODULES

# What the gateway and its faces need, and none of these commands.
HEAVY = (
    "mcp",
    "mcp_types",
    "starlette",
    "uvicorn",
    "httpx2",
    "jsonschema",
    "bm25s",
    "quicktok",
    "yaml",
    "toolkeeper.runtime",
    "toolkeeper.faces",
    "toolkeeper.edge",
    "toolkeeper.pipeline",
    "toolkeeper.catalog.catalog",
    "toolkeeper.downstreams.connection",
)
# Help and the version open no store either.
STORE = ("sqlalchemy", "alembic", "toolkeeper.store")

# Runs the command as `python -m toolkeeper` does, then writes the names of the modules loaded.
RUN_AND_LIST = """
import atexit, json, sys
listing = sys.argv[1]
atexit.register(lambda: open(listing, "w").write(json.dumps(sorted(sys.modules))))
sys.argv = ["toolkeeper", *sys.argv[2:]]
from toolkeeper.__main__ import run
run()
"""


def loaded_by(home: Path, *args: str) -> set[str]:
    listing = home / "modules.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLKEEPER_")}
    env.update(PYTHONPATH=str(ROOT / "src"), TOOLKEEPER_HOME=str(home))
    done = subprocess.run(
        [PY, "-c", RUN_AND_LIST, str(listing), *args], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return set(json.loads(listing.read_text()))


def among(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == name or m.startswith(name + ".") for name in names))


@pytest.fixture
def config(tmp_path: Path) -> Path:
    # A server that none of these commands starts: the configuration is read, not run.
    return write_config(tmp_path, {"echo": {"command": PY, "args": [str(ROOT / "bench" / "echo_server.py")]}})


@pytest.mark.parametrize("args", [("--help",), ("--version",), ("tools", "--help"), ("approvals", "--help")])
def test_help_and_version_load_neither_the_gateway_nor_the_store(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    modules = loaded_by(tmp_path, *args)
    assert "toolkeeper.cli.app" in modules  # the command did run
    assert among(modules, HEAVY + STORE) == []


@pytest.mark.parametrize(
    "args",
    [("approvals", "list"), ("approvals", "list", "--all", "--json"), ("audit", "-n", "5"), ("keys", "list")],
)
def test_store_commands_load_the_store_but_not_the_gateway(
    tmp_path: Path, config: Path, args: tuple[str, ...]
) -> None:
    loaded_by(tmp_path, *args, "--config", str(config))  # the first run makes the store
    modules = loaded_by(tmp_path, *args, "--config", str(config))
    assert "toolkeeper.store.db" in modules
    assert among(modules, HEAVY) == []
    # Nor the modules of the other commands (the client tables, the annotation rules, ...).
    others = set(COMMAND_MODULES.values()) - {COMMAND_MODULES[args[0]]}
    assert sorted(modules.intersection(f"toolkeeper.cli.{module}" for module in others)) == []
    # A store already at the newest schema is not migrated, so Alembic is not loaded.
    assert among(modules, ("alembic",)) == []


# Imports the command modules one by one, in a fresh process, and says which commands each one
# registered.
COMMANDS_BY_MODULE = """
import importlib, json
from toolkeeper.cli import app as cli
found = {}
for module in dict.fromkeys(cli.COMMAND_MODULES.values()):
    before = cli.registered_commands()
    importlib.import_module(f"toolkeeper.cli.{module}")
    found.update(dict.fromkeys(cli.registered_commands() - before, module))
print(json.dumps(found))
"""


def test_each_command_is_looked_up_in_the_module_that_registers_it() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run(
        [PY, "-c", COMMANDS_BY_MODULE], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == COMMAND_MODULES


@pytest.mark.parametrize(
    ("args", "module"), [(("login", "--help"), "signin"), (("import", "--help"), "clients")]
)
def test_a_command_with_a_module_of_its_own_loads_that_module_alone(
    tmp_path: Path, args: tuple[str, ...], module: str
) -> None:
    modules = loaded_by(tmp_path, *args)
    command_modules = {f"toolkeeper.cli.{name}" for name in COMMAND_MODULES.values()}
    assert sorted(modules & command_modules) == [f"toolkeeper.cli.{module}"]


def test_the_help_registers_every_command(tmp_path: Path) -> None:
    modules = loaded_by(tmp_path, "--help")
    assert {f"toolkeeper.cli.{name}" for name in COMMAND_MODULES.values()} <= modules

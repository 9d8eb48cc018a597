"""The package as a person gets it: the wheel and the sdist built from this checkout, installed
into fresh virtual environments (pip, pipx, uv tool, uvx) where this checkout's source is out of
reach, then the installed `toolkeeper` serving the bundled demo servers to a real MCP client.
The container image's entry command and health check run the same way, in a plain virtual
environment: the tests' machine has no container runtime."""

from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx2
import pytest
from conftest import ROOT, free_port, stop, wait_port
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from test_store import POSTGRES

from tests.postgres import drop_schema
from toolkeeper import __version__
from toolkeeper.config.loader import SETTINGS

# The demo configuration's tools, as the gateway exposes them: proof that the demo servers,
# their configuration file and the PyPI time server all came with the install.
DEMO_TOOLS = {
    "notes__search_notes",
    "notes__get_note",
    "notes__create_note",
    "notes__update_note",
    "notes__append_to_note",
    "notes__delete_note",
    "notes__list_categories",
    "files__manage_files",
    "bookmarks__listBookmarks",
    "bookmarks__createBookmark",
    "bookmarks__getBookmark",
    "bookmarks__replaceBookmark",
    "bookmarks__updateBookmark",
    "bookmarks__deleteBookmark",
    "time__get_current_time",
    "time__convert_time",
}
# The packaging tools, installed for these tests only, from the same index as every dependency.
PACKAGING_TOOLS = ("build", "pipx", "uv")
INSTALL_SECONDS = 600


@dataclass(frozen=True)
class Dist:
    wheel: Path
    sdist: Path


@dataclass(frozen=True)
class Image:
    """What the Dockerfile says the container runs, read from the Dockerfile itself."""

    env: dict[str, str]
    volume: str
    port: int
    command: list[str]
    healthcheck: list[str]


def installed_env(**extra: str | Path) -> dict[str, str]:
    """This process's environment without anything that would let an installed `toolkeeper`
    import this checkout instead of itself."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    return {**env, "COLUMNS": "200", **{k: str(v) for k, v in extra.items()}}


def run(
    args: list[str | Path], *, env: dict[str, str], cwd: Path, code: int = 0
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, env=env, cwd=cwd, timeout=INSTALL_SECONDS
    )
    assert done.returncode == code, (args, done.returncode, done.stdout[-3000:], done.stderr[-3000:])
    return done


def new_venv(where: Path, *packages: str | Path) -> Path:
    """A fresh virtual environment with `packages` installed by pip; its bin folder."""
    run([sys.executable, "-m", "venv", where], env=installed_env(), cwd=where.parent)
    bin_dir = where / "bin"
    run(
        [bin_dir / "python", "-m", "pip", "install", "--quiet", *packages],
        env=installed_env(),
        cwd=where.parent,
    )
    return bin_dir


def read_dockerfile(path: Path) -> Image:
    """The image's environment, volume, port, command and health check, from its instructions
    (continuation lines joined; the command and the check in exec form)."""
    lines = re.sub(r"\\\n\s*", " ", path.read_text()).splitlines()
    instructions = [
        line.split(None, 1) for line in lines if line.strip() and not line.lstrip().startswith("#")
    ]
    # The final stage, from its FROM on, is what the container runs.
    start = max(i for i, (word, _) in enumerate(instructions) if word == "FROM")
    env: dict[str, str] = {}
    volume, port, command, healthcheck = "", 0, [], []
    for word, args in instructions[start:]:
        if word == "ENV":
            env.update(item.split("=", 1) for item in shlex.split(args))
        elif word == "VOLUME":
            volume = args.strip()
        elif word == "EXPOSE":
            port = int(args.strip())
        elif word == "CMD":
            command = json.loads(args)
        elif word == "HEALTHCHECK":
            healthcheck = json.loads(args.split(" CMD ", 1)[1])
    return Image(env=env, volume=volume, port=port, command=command, healthcheck=healthcheck)


@pytest.fixture(scope="session")
def packaging_tools(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return new_venv(tmp_path_factory.mktemp("packaging-tools") / "venv", *PACKAGING_TOOLS)


@pytest.fixture(scope="session")
def dist(packaging_tools: Path, tmp_path_factory: pytest.TempPathFactory) -> Dist:
    """The sdist, and the wheel built from that sdist (as `python -m build` does), from a copy of
    the checkout's tracked files: a build never writes into the checkout another worker reads."""
    source = tmp_path_factory.mktemp("source")
    tracked = run(
        ["git", "ls-files", "-z", "pyproject.toml", "README.md", "src"], env=installed_env(), cwd=ROOT
    )
    for name in filter(None, tracked.stdout.split("\0")):
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, source / name)
    out = tmp_path_factory.mktemp("dist")
    run([packaging_tools / "python", "-m", "build", "--outdir", out, source], env=installed_env(), cwd=source)
    (wheel,) = out.glob("*.whl")
    (sdist,) = out.glob("*.tar.gz")
    return Dist(wheel=wheel, sdist=sdist)


@pytest.fixture(scope="session")
def wheel_venv(dist: Dist, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return new_venv(tmp_path_factory.mktemp("from-wheel") / "venv", dist.wheel)


def imports_its_own_copy(bin_dir: Path, cwd: Path) -> bool:
    """The venv's Python imports the installed package, not this checkout's source (the
    gateway's children, the demo servers, run that Python too)."""
    where = run(
        [bin_dir / "python", "-c", "import toolkeeper; print(toolkeeper.__file__)"],
        env=installed_env(),
        cwd=cwd,
    ).stdout.strip()
    return Path(where).resolve().is_relative_to(bin_dir.parent.resolve())


def demo_tools_listed(toolkeeper: list[str | Path], home: Path) -> set[str]:
    """`toolkeeper tools --demo --json`: the tools the gateway reached through the demo servers."""
    listed = run(
        [*toolkeeper, "tools", "--demo", "--json"], env=installed_env(TOOLKEEPER_HOME=home), cwd=home
    )
    return {row["name"] for row in json.loads(listed.stdout) if row["available"]}


async def served_over_stdio(
    command: Path, *args: str, home: Path, uv_env: dict[str, str] | None = None
) -> tuple[set[str], str | None]:
    """`serve --demo` over stdio to a real MCP client: the tools it lists (the configuration menu
    off: the downstream tools beside the configuration tools) and the version the gateway names
    in its serverInfo."""
    params = StdioServerParameters(
        command=str(command),
        args=[*args, "serve", "--demo"],
        env={
            **(uv_env or installed_env()),
            "TOOLKEEPER_HOME": str(home),
            "TOOLKEEPER_ENABLE_CONFIG_TOOLS_MENU": "false",
        },
        cwd=str(home),
    )
    async with Client(params, mode="legacy") as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        # The demo's REST API is an OpenAPI source whose spec loads off the start-up path: on a
        # busy machine its tools follow a little later (a client hears tools/list_changed).
        with anyio.move_on_after(30):
            while not names >= DEMO_TOOLS:
                await anyio.sleep(0.5)
                names = {tool.name for tool in (await client.list_tools()).tools}
        return names, client.server_info.version if client.server_info else None


def test_the_version_is_written_once() -> None:
    """pyproject.toml takes the package's `__version__`, and the running package reads nothing
    else: no other copy of the number to fall out of step."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in pyproject["project"] and "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "toolkeeper.__version__"}


def test_the_wheel_and_the_sdist_hold_every_file_of_the_package(dist: Dist) -> None:
    """Every tracked file under src/toolkeeper (code, demo servers, demo configuration, Alembic's
    template and migrations) is in both; a data file the package-data globs miss fails here."""
    import tarfile
    import zipfile

    tracked = run(["git", "ls-files", "src/toolkeeper"], env=installed_env(), cwd=ROOT).stdout.split()
    package_files = {name.removeprefix("src/") for name in tracked}
    assert {"toolkeeper/demo/config.json", "toolkeeper/store/migrations/script.py.mako"} <= package_files
    assert any(name.startswith("toolkeeper/store/migrations/versions/0001_") for name in package_files)
    with zipfile.ZipFile(dist.wheel) as wheel:
        in_wheel = set(wheel.namelist())
    assert package_files - in_wheel == set()
    with tarfile.open(dist.sdist) as sdist:
        in_sdist = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    assert {f"src/{name}" for name in package_files} - in_sdist == set()
    assert dist.wheel.name == f"toolkeeper-{__version__}-py3-none-any.whl"
    assert dist.sdist.name == f"toolkeeper-{__version__}.tar.gz"


@pytest.mark.anyio
async def test_the_installed_wheel_serves_the_demo_to_a_real_client(wheel_venv: Path, tmp_path: Path) -> None:
    toolkeeper = wheel_venv / "toolkeeper"
    version = run([toolkeeper, "--version"], env=installed_env(), cwd=tmp_path).stdout.strip()
    assert version == f"toolkeeper {__version__}"
    assert imports_its_own_copy(wheel_venv, tmp_path)
    names, server_version = await served_over_stdio(toolkeeper, home=tmp_path)
    assert names >= DEMO_TOOLS
    assert server_version == __version__


@pytest.mark.anyio
async def test_the_installed_sdist_serves_the_demo_to_a_real_client(
    packaging_tools: Path, dist: Dist, tmp_path: Path
) -> None:
    """The installer builds the sdist itself here, so what the sdist leaves out is missing from
    the install. uv's venv and installer: pip's path is the wheel's test, and uv's is quicker
    for the same fresh environment."""
    uv, env = packaging_tools / "uv", installed_env(UV_PYTHON_DOWNLOADS="never")
    run([uv, "venv", "--python", sys.executable, tmp_path / "venv"], env=env, cwd=tmp_path)
    venv = tmp_path / "venv" / "bin"
    run([uv, "pip", "install", "--python", venv / "python", dist.sdist], env=env, cwd=tmp_path)
    assert imports_its_own_copy(venv, tmp_path)
    version = run([venv / "toolkeeper", "--version"], env=installed_env(), cwd=tmp_path).stdout.strip()
    assert version == f"toolkeeper {__version__}"
    names, server_version = await served_over_stdio(venv / "toolkeeper", home=tmp_path)
    assert names >= DEMO_TOOLS
    assert server_version == __version__


def test_pipx_installs_the_wheel(packaging_tools: Path, dist: Dist, tmp_path: Path) -> None:
    env = installed_env(
        PIPX_HOME=tmp_path / "pipx", PIPX_BIN_DIR=tmp_path / "bin", PIPX_MAN_DIR=tmp_path / "man"
    )
    run([packaging_tools / "pipx", "install", dist.wheel], env=env, cwd=tmp_path)
    toolkeeper = tmp_path / "bin" / "toolkeeper"
    assert run([toolkeeper, "--version"], env=env, cwd=tmp_path).stdout.strip() == f"toolkeeper {__version__}"
    assert demo_tools_listed([toolkeeper], tmp_path) == DEMO_TOOLS


@pytest.mark.anyio
async def test_uv_tool_install_and_uvx_run_the_wheel(
    packaging_tools: Path, dist: Dist, tmp_path: Path
) -> None:
    """`uv tool install` puts a `toolkeeper` on the tool bin folder; `uvx --from WHEEL toolkeeper
    serve --demo` serves a real client without installing anything."""
    uv = packaging_tools / "uv"
    env = installed_env(
        UV_TOOL_DIR=tmp_path / "uv-tools",
        UV_TOOL_BIN_DIR=tmp_path / "bin",
        UV_PYTHON=sys.executable,
        UV_PYTHON_DOWNLOADS="never",
    )
    run([uv, "tool", "install", dist.wheel], env=env, cwd=tmp_path)
    toolkeeper = tmp_path / "bin" / "toolkeeper"
    assert run([toolkeeper, "--version"], env=env, cwd=tmp_path).stdout.strip() == f"toolkeeper {__version__}"
    assert demo_tools_listed([toolkeeper], tmp_path) == DEMO_TOOLS
    names, server_version = await served_over_stdio(
        packaging_tools / "uvx", "--from", str(dist.wheel), "toolkeeper", home=tmp_path, uv_env=env
    )
    assert names >= DEMO_TOOLS
    assert server_version == __version__


def test_the_compose_file_sets_only_settings_toolkeeper_reads() -> None:
    """compose.yaml's environment (its commented examples too) names real settings."""
    known = {name for setting in SETTINGS for name in setting.env} | {"TOOLKEEPER_CONFIG"}
    named = set(re.findall(r"\b(TOOLKEEPER_[A-Z_]+):", (ROOT / "compose.yaml").read_text()))
    assert "TOOLKEEPER_DATABASE_URL" in named
    assert named - known == set()


@pytest.mark.anyio
@pytest.mark.parametrize("store", ["volume", "postgresql"])
async def test_the_image_entry_command_serves_after_a_key_is_made(
    store: str, wheel_venv: Path, tmp_path: Path
) -> None:
    """The Dockerfile's command with its environment, in the venv of the wheel: the store in the
    volume (the image alone) or in PostgreSQL (as compose.yaml runs it). Steps as a person meets
    them: refused until a client key exists, then serving, the health check passing, a request
    without the key refused and a client with it listing the demo tools."""
    image = read_dockerfile(ROOT / "Dockerfile")
    assert image.env["TOOLKEEPER_HOME"] == image.volume and image.port == 8765
    assert image.command[:2] == ["toolkeeper", "serve"] and image.healthcheck[0] == "python"
    port = free_port()
    volume = tmp_path / "data"
    volume.mkdir()
    env = installed_env(
        **{**image.env, "TOOLKEEPER_HOME": str(volume)},
        TOOLKEEPER_HTTP_PORT=str(port),
        TOOLKEEPER_ENABLE_CONFIG_TOOLS_MENU="false",
        # No configuration file of the person running the tests: the image has none either.
        XDG_CONFIG_HOME=tmp_path / "config",
    )
    schema = f"tk_image_{secrets.token_hex(4)}"
    if store == "postgresql":
        env["TOOLKEEPER_DATABASE_URL"] = f"{POSTGRES}?schema={schema}"
    command = [wheel_venv / image.command[0], *image.command[1:]]
    try:
        refused = run(command, env=env, cwd=tmp_path, code=2)
        assert "no client keys" in refused.stderr and "toolkeeper keys create" in refused.stderr
        created = run(
            [wheel_venv / "toolkeeper", "keys", "create", "container-client", "--json"], env=env, cwd=tmp_path
        )
        token = json.loads(created.stdout)["token"]
        log = tmp_path / "gateway.log"
        with log.open("wb") as sink:
            process = subprocess.Popen(
                [str(a) for a in command], env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=sink
            )
        try:
            wait_port(port, timeout=60)
            run([wheel_venv / "python", *image.healthcheck[1:]], env=env, cwd=tmp_path)
            url = f"http://127.0.0.1:{port}/mcp"
            async with httpx2.AsyncClient() as plain:
                anonymous = await plain.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
            assert anonymous.status_code == 401
            headers = {"Authorization": f"Bearer {token}"}
            transport = streamable_http_client(url, http_client=create_mcp_http_client(headers=headers))
            async with Client(transport, mode="legacy") as client:
                assert {tool.name for tool in (await client.list_tools()).tools} == DEMO_TOOLS
        finally:
            stop(process)
        # Stopped: the health check fails, as the container runtime would see it.
        run([wheel_venv / "python", *image.healthcheck[1:]], env=env, cwd=tmp_path, code=1)
    finally:
        if store == "postgresql":
            await drop_schema(schema)

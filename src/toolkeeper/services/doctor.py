"""`toolkeeper doctor`: the things a new user gets wrong, each found by a small check and named
with its fix.

`examine` runs the checks in this order, each returning findings (ok, warning, problem or
skipped; what it is about; what is wrong; what to run or edit next):
1. the configuration file: where it was found and whether it reads;
2. every `${VAR}` the file uses that is not set and has no default;
3. each stdio server's command: on PATH, or a file that exists and can be run;
4. the clients whose toolkeeper entry starts a program that does not exist (read by
   `toolkeeper.services.clients`);
5. the store: reachable and writable;
6. the HTTP port: free on the configured host;
7. each server: starts and answers (else its last error and stderr lines);
8. each remote server that signs in: the account's live state, from the tokens kept in the store
   (signed in as whom, or needs a sign-in, with the command that signs in);
9. per server, how many of its tools the approval policy would ask about, with the command
   that explains one.

The servers are connected by the face (the running gateway is not a service's to build); the
checks read what `Live` offers of it. A problem makes the command exit non-zero; a warning does
not.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

import anyio
from sqlalchemy import update

from toolkeeper.config import Config, ConfigError, load_config
from toolkeeper.config.entries import ENV_REFERENCE, builtin_variable
from toolkeeper.config.loader import demo_config_path, find_config
from toolkeeper.config.model import ServerConfig
from toolkeeper.downstreams.base import Downstream, State
from toolkeeper.downstreams.kinds import KINDS
from toolkeeper.downstreams.signin.keeper import SignIns
from toolkeeper.downstreams.status import describe_progress
from toolkeeper.downstreams.stdio import child_environment, recent_stderr
from toolkeeper.services import Services
from toolkeeper.services.clients import toolkeeper_entries
from toolkeeper.services.signin import AccountState, SignInService, SignInState
from toolkeeper.store import Store, StoreError
from toolkeeper.store.db import store_url
from toolkeeper.store.tables import store_revision

STDERR_LINES_SHOWN = 10
# A child that exits at once has written its stderr by the time its connection fails; the thread
# that reads it may lag a moment behind.
STDERR_GRACE_SECONDS = 1.0


class Level(StrEnum):
    OK = "ok"
    WARNING = "warning"
    PROBLEM = "problem"
    SKIPPED = "skipped"


@dataclass(frozen=True)
class Finding:
    check: str  # which: config, variables, command, sign-in, clients, store, port, server, approvals
    level: Level
    subject: str  # what it is about: a file, a server, a variable, an address
    message: str
    # What to run or edit next: the fix of a warning or problem, or the command that shows more.
    next: str | None = None
    details: tuple[str, ...] = ()  # lines shown under it (a server's last stderr lines)

    def as_json(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "level": self.level.value,
            "subject": self.subject,
            "message": self.message,
            "next": self.next,
            "details": list(self.details),
        }


class Live(Protocol):
    """What the checks read of the running gateway the face connected."""

    @property
    def pool(self) -> Iterable[Downstream]: ...

    @property
    def services(self) -> Services | None: ...

    @property
    def sign_ins(self) -> SignIns: ...


class Connect(Protocol):
    """Connects the configuration's servers (over `store`) until the context ends."""

    def __call__(self, config: Config, *, store: Store | None) -> AbstractAsyncContextManager[Live]: ...


@dataclass(frozen=True)
class Examination:
    """What to examine and how: the configuration as the command was given it (`explicit`, or
    `demo`), how the face connects the servers, and the options that make a suggested
    `toolkeeper` command use the same configuration (e.g. `--demo`)."""

    explicit: Path | None
    demo: bool
    connect: Connect
    command_options: str = ""
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)


async def examine(how: Examination) -> list[Finding]:
    """Run every check in order (see the module's docstring)."""
    config, findings = check_config(how.explicit, demo=how.demo)
    if config is None:
        findings.append(_skipped("checks", "the others need a configuration that can be read"))
        return findings
    findings += check_variables(config.path, how.environ)
    findings += check_commands(config)
    findings += check_clients()
    store, store_findings = await check_store(config)
    findings += store_findings
    findings += check_port(config)
    stored_policy = store is not None or not has_problem(store_findings)
    with tempfile.TemporaryDirectory(prefix="toolkeeper-doctor-") as scratch:
        if store is None:
            # The policy as configured, with no stored modes or rules: what a store not made yet
            # will hold, and what is left to count when the store cannot be read.
            store = await Store(f"sqlite:///{Path(scratch) / 'store.sqlite'}").open()
        try:
            async with how.connect(config, store=store) as live:
                findings += await check_servers_answer(live)
                findings += check_sign_ins(config, live, how.command_options)
                findings += await check_asked(live, how.command_options, stored_policy=stored_policy)
        finally:
            await store.close()
    return findings


def has_problem(findings: Iterable[Finding]) -> bool:
    return any(f.level is Level.PROBLEM for f in findings)


# -- 1. the configuration file ---------------------------------------------------------------


def check_config(explicit: Path | None, *, demo: bool = False) -> tuple[Config | None, list[Finding]]:
    path, origin = (demo_config_path(), "the bundled demo, --demo") if demo else find_config(explicit)
    explicit = path if demo else explicit
    try:
        config = load_config(explicit, kinds=KINDS.entries)
    except ConfigError as exc:
        return None, [
            Finding("config", Level.PROBLEM, str(path), f"found ({origin}) but cannot be used: {exc}")
        ]
    servers = len(config.servers) + len(config.skipped) + len(config.disabled)
    message = f"found ({origin}) and valid: {servers} server(s)"
    if config.disabled:
        message += f", {len(config.disabled)} disabled ({', '.join(config.disabled)})"
    return config, [Finding("config", Level.OK, str(path), message)]


# -- 2. environment variables ----------------------------------------------------------------


def check_variables(path: Path | None, environ: Mapping[str, str]) -> list[Finding]:
    """Every `${VAR}` without a default the file holds (anywhere, a disabled server's too) that is
    neither set nor one toolkeeper defines itself."""
    if path is None:
        return []
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []  # the configuration check has read this file already
    findings: list[Finding] = []
    for where, text in _strings(raw, ""):
        for match in ENV_REFERENCE.finditer(text):
            name, default = match.group(1), match.group(2)
            if default is not None or name in environ or builtin_variable(name) is not None:
                continue
            findings.append(
                Finding(
                    "variables",
                    Level.PROBLEM,
                    name,
                    f"${{{name}}} in {where} is not set",
                    f"export {name}=… before starting toolkeeper (or in the client's env for it), "
                    f"or write ${{{name}:-default}}",
                )
            )
    if not findings:
        findings.append(Finding("variables", Level.OK, str(path), "every ${VAR} it uses is set"))
    return findings


def _strings(value: Any, where: str) -> Iterator[tuple[str, str]]:
    """Each string in a JSON value with where it is (`mcpServers.x.env.TOKEN`)."""
    if isinstance(value, str):
        yield where or "the file", value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(item, f"{where}.{key}" if where else str(key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _strings(item, f"{where}[{i}]")


# -- 3. commands -----------------------------------------------------------------------------


def check_commands(config: Config) -> list[Finding]:
    findings: list[Finding] = []
    for entry in config.servers:
        server = _stdio_server(entry)
        if server is None:
            continue
        found = _where_command_runs(server)
        shown = server.redact(server.command or "")
        if found is None:
            findings.append(
                Finding(
                    "command",
                    Level.PROBLEM,
                    server.name,
                    f"command {shown!r} is not on PATH, or is not a file that can be run",
                    f"install it, or give its absolute path as 'command' of mcpServers.{server.name}",
                )
            )
        else:
            findings.append(
                Finding("command", Level.OK, server.name, f"command found: {server.redact(found)}")
            )
    for name, reason in config.skipped.items():
        findings.append(Finding("command", Level.PROBLEM, name, f"not started: {reason}"))
    return findings


def _stdio_server(config: object) -> ServerConfig | None:
    """The server's configuration when it is a command toolkeeper starts."""
    if isinstance(config, ServerConfig) and config.transport == "stdio" and config.command:
        return config
    return None


def _where_command_runs(server: ServerConfig) -> str | None:
    return command_path(server.command or "", child_environment(server).get("PATH"), server.cwd)


def command_path(command: str, path: str | None, cwd: str | None = None) -> str | None:
    """Where a command runs from: a path (relative to `cwd`) that is an executable file, or the
    first match on `path`; None when there is none."""
    if os.sep in command or (os.altsep and os.altsep in command):
        candidate = Path(cwd or ".", command).expanduser()
        return str(candidate) if candidate.is_file() and os.access(candidate, os.X_OK) else None
    return shutil.which(command, path=path)


# -- 4. clients ------------------------------------------------------------------------------


ClientEntry = tuple[str, Path, str]  # the client's name, its configuration file, the command


def check_clients() -> list[Finding]:
    """The clients whose files start toolkeeper (as `toolkeeper install` writes them), checked by
    `clients_pointing_nowhere`."""
    found = clients_pointing_nowhere(toolkeeper_entries())
    if not found:
        return [
            Finding(
                "clients",
                Level.OK,
                "clients",
                "no client's file starts toolkeeper yet",
                "toolkeeper install CLIENT",
            )
        ]
    return found


def clients_pointing_nowhere(entries: Iterable[ClientEntry]) -> list[Finding]:
    """A client whose toolkeeper entry starts a program that does not exist (toolkeeper moved or
    uninstalled since it was installed into the client) is a problem."""
    findings: list[Finding] = []
    for client, file, command in entries:
        if command_path(command, os.environ.get("PATH")) is None:
            findings.append(
                Finding(
                    "clients",
                    Level.PROBLEM,
                    client,
                    f"{file} starts toolkeeper as {command!r}, which does not exist",
                    f"toolkeeper install {client}",
                )
            )
        else:
            findings.append(Finding("clients", Level.OK, client, f"{file} starts toolkeeper as {command}"))
    return findings


# -- 5. the store ----------------------------------------------------------------------------


class _RolledBack(Exception):
    """Ends the probe's transaction without committing it."""


async def check_store(config: Config) -> tuple[Store | None, list[Finding]]:
    """The store opened (a PostgreSQL one, or a SQLite file that exists) and written to in a
    transaction that is rolled back; a SQLite file not made yet is not made here: its folder, or
    the nearest one that exists, must be one this user can write to. Returns the store, open,
    when it could be written."""
    settings = config.settings
    store = Store(store_url(settings), timeout=settings.database_timeout)
    fix = "set TOOLKEEPER_HOME (or toolkeeper.home) to a folder you can write to"
    if store.path is not None and not store.path.exists():
        folder = _nearest_existing(store.path.parent)
        if folder.is_dir() and os.access(folder, os.W_OK | os.X_OK):
            return None, [Finding("store", Level.OK, store.label, "not made yet; its folder can be written")]
        why = "is a file, not a folder" if not folder.is_dir() else "cannot be written by you"
        return None, [Finding("store", Level.PROBLEM, store.label, f"cannot be made: {folder} {why}", fix)]
    if store.path is None:
        fix = "check toolkeeper.databaseUrl, that the database runs, and that its user may write"
    try:
        await store.open()
        async with store.write(bump_revision=False) as conn:
            # A real change, so the database takes its write lock and checks it may write; undone.
            await conn.execute(update(store_revision).values(value=store_revision.c.value + 1))
            raise _RolledBack
    except _RolledBack:
        return store, [Finding("store", Level.OK, store.label, "reachable and writable")]
    except StoreError as exc:
        await store.close()
        return None, [Finding("store", Level.PROBLEM, store.label, f"not usable: {exc}", fix)]
    except Exception as exc:  # a database driver that is not installed, a URL it cannot read
        await store.close()
        why = f"{type(exc).__name__}: {exc}"
        return None, [Finding("store", Level.PROBLEM, store.label, f"not usable: {why}", fix)]


def _nearest_existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


# -- 6. the HTTP port ------------------------------------------------------------------------


def check_port(config: Config) -> list[Finding]:
    """Whether `toolkeeper serve --transport http` could listen where the settings say."""
    host, port = config.settings.http_host, config.settings.http_port
    address = f"{host}:{port}"
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        with socket.create_server((host, port), family=family):
            pass
    except OSError as exc:
        why = os.strerror(exc.errno) if exc.errno else str(exc)
        return [
            Finding(
                "port",
                Level.WARNING,
                address,
                f"in use or not available ({why}): `toolkeeper serve --transport http` "
                "cannot listen there (a toolkeeper already serving there is fine)",
                "stop what listens there, or choose another port: --port N, or http.port under toolkeeper "
                "(TOOLKEEPER_HTTP_PORT)",
            )
        ]
    return [Finding("port", Level.OK, address, "free for `toolkeeper serve --transport http`")]


# -- 7. servers start and answer -------------------------------------------------------------


async def check_servers_answer(live: Live) -> list[Finding]:
    """Each server whose command was found: ready, or its last error and stderr lines."""
    findings: list[Finding] = []
    for downstream in live.pool:
        if _command_missing(downstream.config) or downstream.state is State.NEEDS_SIGN_IN:
            continue  # the command check or the sign-in check says so, with its fix
        if downstream.state is State.READY:
            findings.append(
                Finding("server", Level.OK, downstream.name, f"answers: {len(downstream.tools)} tool(s)")
            )
            continue
        if downstream.state is State.LOADING:  # a large spec, on its way: not a fault
            progress = describe_progress(downstream.load_progress)
            findings.append(
                Finding("server", Level.WARNING, downstream.name, f"still loading: {progress}; tools follow")
            )
            continue
        lines = await _stderr_of(downstream)
        findings.append(
            Finding(
                "server",
                Level.PROBLEM,
                downstream.name,
                f"does not answer ({downstream.state.value}): {downstream.last_error or 'no reason known'}",
                _how_to_see_why(downstream),
                lines,
            )
        )
    return findings


# -- 8. sign-ins -----------------------------------------------------------------------------


def check_sign_ins(config: Config, live: Live, command_options: str = "") -> list[Finding]:
    """Each remote server that signs in, with its account's state as the running gateway has it
    from the store's tokens: signed in as whom, needs a sign-in (its tools wait for it), or not
    asked for yet; named with the command that signs in. Where each principal signs in as
    themselves, the local user's account, and who else is signed in."""
    service = SignInService(config, live.sign_ins, lambda: live.pool)
    return [_sign_in_finding(state, live.sign_ins, command_options) for state in service.states()]


def _sign_in_finding(state: AccountState, sign_ins: SignIns, command_options: str) -> Finding:
    login = f"toolkeeper login {state.server}" + (f" {command_options}" if command_options else "")
    others = [account for account in sign_ins.accounts_of(state.server) if account != state.account]
    also = f"; also signed in: {', '.join(others)}" if state.mode == "perPrincipal" and others else ""
    whose = f"account {state.account}: " if state.mode == "perPrincipal" else ""
    if state.state is SignInState.SIGNED_IN:
        who = state.subject or "an unnamed account"
        return Finding("sign-in", Level.OK, state.server, f"{whose}signed in as {who}{also}")
    if state.state is SignInState.NEEDS_SIGN_IN:
        message = f"{whose}needs a sign-in: its tools are not served until then{also}"
        return Finding("sign-in", Level.WARNING, state.server, message, login)
    message = f"{whose}not signed in; the server has not asked for it (it answered without){also}"
    return Finding("sign-in", Level.OK, state.server, message, login)


def _command_missing(config: object) -> bool:
    server = _stdio_server(config)
    return server is not None and _where_command_runs(server) is None


def _how_to_see_why(downstream: Downstream) -> str:
    config = downstream.config
    if isinstance(config, ServerConfig) and config.transport == "stdio":
        return f"run its command to see why: {config.describe()}"
    return f"check that it runs and can be reached: {config.describe()}"


async def _stderr_of(downstream: Downstream) -> tuple[str, ...]:
    """The server's last stderr lines, without the configuration's secrets."""
    if not isinstance(downstream.config, ServerConfig) or downstream.config.transport != "stdio":
        return ()
    with anyio.move_on_after(STDERR_GRACE_SECONDS):
        while not recent_stderr(downstream.name):
            await anyio.sleep(0.05)
    lines = recent_stderr(downstream.name)[-STDERR_LINES_SHOWN:]
    return tuple(downstream.config.redact(line) for line in lines)


# -- 9. what the approval policy asks about --------------------------------------------------


async def check_asked(live: Live, command_options: str, *, stored_policy: bool = True) -> list[Finding]:
    """Per server that answers: how many of its tools a call with no arguments is asked about
    (from the tools' static hints, as `policy explain` decides), and the command that explains
    one of them. Without `stored_policy` (the store could not be used) the counts say they hold
    the configuration's policy alone."""
    services = live.services
    if services is None:
        return [_skipped("approvals", "no store to read the approval policy from")]
    verdicts = await services.policy.without_arguments()
    findings: list[Finding] = []
    for downstream in live.pool:
        if downstream.state is not State.READY:
            continue
        own = [v for v in verdicts if v["server"] == downstream.name]
        if not own:
            findings.append(Finding("approvals", Level.OK, downstream.name, "offers no tools"))
            continue
        asked = [v for v in own if v["decision"] == "ask"]
        denied = [v for v in own if v["decision"] == "deny"]
        message = f"{len(asked)} of its {len(own)} tool(s) would be asked about"
        if denied:
            message += f", {len(denied)} never run"
        refined = [v for v in asked if v["dependsOnArguments"]]
        if refined:
            message += f" ({len(refined)} of them may not be, depending on a call's arguments)"
        if not stored_policy:
            message += "; by the configuration alone, without the store's confirm modes and rules"
        example = _example(asked or own)
        command = f"toolkeeper policy explain {shlex.quote(example['tool'])}"
        if example["dependsOnArguments"]:
            command += " '<the arguments as JSON>'"
        if command_options:
            command += f" {command_options}"
        findings.append(Finding("approvals", Level.OK, downstream.name, message, command))
    return findings


def _example(verdicts: list[dict[str, Any]]) -> dict[str, Any]:
    """A tool to explain: one whose decision does not depend on its arguments if there is one."""
    return next((v for v in verdicts if not v["dependsOnArguments"]), verdicts[0])


def _skipped(check: str, why: str) -> Finding:
    return Finding(check, Level.SKIPPED, check, f"skipped: {why}")

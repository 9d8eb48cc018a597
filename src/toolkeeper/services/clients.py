"""Moving a person's MCP servers between their clients and toolkeeper: the one place that knows
where each client keeps its configuration and how it writes it.

`import_servers` merges a client's servers into toolkeeper's configuration file; `install` writes
toolkeeper's entry into the client's file (optionally moving the client's servers out) and keeps
a record of what it did; `uninstall` undoes that: it restores the backup while the file is as
install left it, else removes just toolkeeper's entry and puts back the servers it moved.

Every file is written whole or not at all (a temporary file beside it, then a rename), and every
client file is copied to `<file>.toolkeeper-backup-<time>` before it changes. A file reached
through a symbolic link (a dotfiles repository) is written where the link points, so the link
stays; a client file its owner made read-only is left alone unless the person forces the change,
and then stays read-only.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import logging
import os
import re
import secrets
import shlex
import shutil
import stat
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import platformdirs

from toolkeeper.config import Config, ConfigError, parse_config_text
from toolkeeper.config.entries import COMMON_KEYS, ENV_REFERENCE
from toolkeeper.config.loader import SERVER_NAME, user_config_path
from toolkeeper.config.mcp import PROTOCOL_KEYS, REMOTE_KEYS, STDIO_KEYS, starts_toolkeeper
from toolkeeper.config.model import CREDENTIAL_NAME, DEFAULT_HTTP_HOST, DEFAULT_HTTP_PORT
from toolkeeper.downstreams.kinds import KINDS
from toolkeeper.errors import ErrorKind, NextStep, ServiceError

TOOLKEEPER_ENTRY = "toolkeeper"
KNOWN_ENTRY_KEYS = COMMON_KEYS | STDIO_KEYS | REMOTE_KEYS | PROTOCOL_KEYS
VSCODE_INPUT = re.compile(r"\$\{input:([^}]+)\}")
VSCODE_ENV = re.compile(r"\$\{env:([A-Za-z_][A-Za-z0-9_]*)\}")
# What VS Code fills in itself; toolkeeper would read them as environment variables.
VSCODE_PREDEFINED = re.compile(r"\$\{(workspaceFolder\w*|userHome|pathSeparator|cwd|/)\}")


@dataclass(frozen=True, kw_only=True)
class Client:
    """One MCP client: where its user-level file lives on each platform (relative to the home
    directory, or to the platform's application-data directory), its project-level file, the key
    that holds its servers, whether it reads comments and trailing commas, and whether a person
    adds servers through its own command instead of editing the file."""

    name: str
    title: str
    linux: str  # under $XDG_CONFIG_HOME when it starts with "~config/", else under the home
    macos: str
    windows: str  # under %APPDATA% when it starts with "~appdata/", else under the home
    project: str | None = None
    key: str = "mcpServers"
    jsonc: bool = False
    remote_url_key: str | None = "url"  # None: the file starts stdio servers only
    remote_type: str | None = None  # the `type` a remote entry carries, if the client wants one
    command_line: bool = False  # the client's supported way is its own command (`claude mcp add`)


CLIENTS: dict[str, Client] = {
    client.name: client
    for client in (
        Client(
            name="claude-desktop",
            title="Claude Desktop",
            linux="~config/Claude/claude_desktop_config.json",
            macos="Library/Application Support/Claude/claude_desktop_config.json",
            windows="~appdata/Claude/claude_desktop_config.json",
            remote_url_key=None,
        ),
        Client(
            name="claude-code",
            title="Claude Code",
            linux=".claude.json",
            macos=".claude.json",
            windows=".claude.json",
            project=".mcp.json",
            remote_type="http",
            command_line=True,
        ),
        Client(
            name="cursor",
            title="Cursor",
            linux=".cursor/mcp.json",
            macos=".cursor/mcp.json",
            windows=".cursor/mcp.json",
            project=".cursor/mcp.json",
            jsonc=True,
        ),
        Client(
            name="vscode",
            title="VS Code",
            linux="~config/Code/User/mcp.json",
            macos="Library/Application Support/Code/User/mcp.json",
            windows="~appdata/Code/User/mcp.json",
            project=".vscode/mcp.json",
            key="servers",
            jsonc=True,
            remote_type="http",
        ),
        Client(
            name="windsurf",
            title="Windsurf",
            linux=".codeium/windsurf/mcp_config.json",
            macos=".codeium/windsurf/mcp_config.json",
            windows=".codeium/windsurf/mcp_config.json",
            remote_url_key="serverUrl",
        ),
    )
}


@dataclass(frozen=True, kw_only=True)
class Place:
    """Where files are looked for: the home directory, the platform (`sys.platform`'s spelling),
    the environment (XDG_CONFIG_HOME, APPDATA) and the project directory."""

    home: Path
    platform: str
    environ: Mapping[str, str]
    project: Path

    @classmethod
    def here(cls) -> Place:
        return cls(home=Path.home(), platform=sys.platform, environ=os.environ, project=Path.cwd())


def client_named(name: str) -> Client:
    try:
        return CLIENTS[name]
    except KeyError:
        raise ServiceError(
            f"Unknown client {name!r}: choose one of {', '.join(CLIENTS)}, or give a file's path.",
            ErrorKind.NOT_FOUND,
        ) from None


def client_file(client: Client, place: Place, *, project: bool = False) -> Path:
    """The client's file: its project-level file in the project directory, or its user-level file
    where the client keeps it on this platform."""
    if project:
        if client.project is None:
            raise ServiceError(
                f"{client.title} has no project-level configuration file; leave out the project."
            )
        return place.project / client.project
    if place.platform.startswith("win"):
        written = client.windows
        appdata = place.environ.get("APPDATA") or str(place.home / "AppData" / "Roaming")
        return _under(written, "~appdata/", Path(appdata), place.home)
    if place.platform == "darwin":
        return place.home / client.macos
    config_home = place.environ.get("XDG_CONFIG_HOME") or str(place.home / ".config")
    return _under(client.linux, "~config/", Path(config_home), place.home)


def _under(written: str, marker: str, base: Path, home: Path) -> Path:
    return base / written.removeprefix(marker) if written.startswith(marker) else home / written


# -- reading ------------------------------------------------------------------------------------


def strip_jsonc(text: str) -> str:
    """JSON from JSONC: `//` and `/* */` comments and trailing commas removed, strings untouched.
    Removed text becomes spaces (newlines stay), so a JSON error still points at the right line."""
    result: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == '"':
            end = i + 1
            while end < n and text[end] != '"':
                end += 2 if text[end] == "\\" else 1
            result.append(text[i : end + 1])
            i = end + 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end == -1 else end
            result.append(" " * (end - i))
            i = end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end == -1 else end + 2
            result.append("".join(c if c == "\n" else " " for c in text[i:end]))
            i = end
        elif ch == ",":
            following = i + 1
            while following < n:
                if text[following] in " \t\r\n":
                    following += 1
                elif text.startswith("//", following):
                    newline = text.find("\n", following)
                    following = n if newline == -1 else newline
                elif text.startswith("/*", following):
                    close = text.find("*/", following + 2)
                    following = n if close == -1 else close + 2
                else:
                    break
            result.append(" " if following < n and text[following] in "]}" else ",")
            i += 1
        else:
            result.append(ch)
            i += 1
    return "".join(result)


@dataclass(frozen=True)
class ClientDocument:
    """A client file as read: its bytes, its top-level object, and whether it was JSONC."""

    path: Path
    raw: bytes
    data: dict[str, Any]
    had_comments: bool


def read_client_file(path: Path, *, jsonc: bool, missing_ok: bool = False) -> ClientDocument | None:
    """The file's top-level object. A missing file is None when `missing_ok`, else refused."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        if missing_ok:
            return None
        raise ServiceError(
            f"{path}: no such file. Check the path, or that the client is installed.", ErrorKind.NOT_FOUND
        ) from None
    except OSError as exc:
        raise ServiceError(f"{path}: cannot be read ({exc.strerror}). Check its permissions.") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ServiceError(f"{path}: not UTF-8 text (byte {exc.start}). Save it as UTF-8.") from None
    plain = strip_jsonc(text) if jsonc else text
    try:
        data = json.loads(plain) if plain.strip() else {}
    except json.JSONDecodeError as exc:
        allowed = "JSON with comments" if jsonc else "JSON (this client accepts no comments)"
        raise ServiceError(
            f"{path}:{exc.lineno}:{exc.colno}: not valid {allowed}: {exc.msg}. Fix the file there first."
        ) from None
    if not isinstance(data, dict):
        raise ServiceError(f"{path}: the top level must be a JSON object. Fix the file first.")
    return ClientDocument(path=path, raw=raw, data=data, had_comments=plain != text)


def _servers_of(document: ClientDocument, key: str) -> dict[str, Any]:
    servers = document.data.get(key, {})
    if not isinstance(servers, dict):
        raise ServiceError(
            f"{document.path}: {key!r} must be an object of server entries. Fix the file first."
        )
    return servers


def _guess_key(data: Mapping[str, Any]) -> str:
    """The key a file of unknown origin holds its servers under."""
    return "servers" if "servers" in data and "mcpServers" not in data else "mcpServers"


# -- converting one entry -------------------------------------------------------------------------


@dataclass
class Conversion:
    """An entry as toolkeeper's file writes it, with what a person should know about it."""

    entry: dict[str, Any]
    notes: list[str] = field(default_factory=list)


def variable_for_input(input_id: str) -> str:
    """The environment variable a VS Code input becomes: its id in capitals, `_` for the rest."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", input_id).upper()
    return name if re.match(r"[A-Z_]", name) else f"_{name}"


def convert_entry(name: str, entry: Mapping[str, Any], inputs: Mapping[str, str]) -> Conversion:
    """A client's entry in toolkeeper's format: keys toolkeeper does not read are dropped (named in
    a note), a remote `serverUrl` becomes `url`, VS Code's `${input:id}` and `${env:NAME}` become
    `${VAR}` references, and literal secrets in `env` or `headers` are kept with a warning."""
    conversion = Conversion(entry={})
    dropped = []
    for key, value in entry.items():
        if key == "serverUrl" and "url" not in entry:
            conversion.entry["url"] = value
        elif key in KNOWN_ENTRY_KEYS:
            conversion.entry[key] = _referenced(value, name=name, inputs=inputs, notes=conversion.notes)
        else:
            dropped.append(key)
    if dropped:
        conversion.notes.append(
            f"{name}: not kept (toolkeeper does not read them): {', '.join(sorted(dropped))}."
        )
    for section in ("env", "headers"):
        values = conversion.entry.get(section)
        if not isinstance(values, dict):
            continue
        for key, value in values.items():
            if isinstance(value, str) and _looks_secret(key, value):
                conversion.notes.append(
                    f"{name}: {section}.{key} holds a literal value that looks like a secret; "
                    "toolkeeper's file "
                    f"keeps it in plain text. Consider writing ${{{key.upper().replace('-', '_')}}} "
                    "and setting that variable instead."
                )
    conversion.notes = list(dict.fromkeys(conversion.notes))  # an input used twice is told once
    return conversion


def _looks_secret(key: str, value: str) -> bool:
    if not value or ENV_REFERENCE.fullmatch(value):
        return False
    return bool(CREDENTIAL_NAME.fullmatch(key)) or value.lower().startswith(("bearer ", "basic "))


def _referenced(value: Any, *, name: str, inputs: Mapping[str, str], notes: list[str]) -> Any:
    """`value` (a string, or a list or object of them) with the client's variables as
    toolkeeper's `${VAR}`; each input replaced, and each variable only the client fills, noted."""
    if isinstance(value, list):
        return [_referenced(item, name=name, inputs=inputs, notes=notes) for item in value]
    if isinstance(value, dict):
        return {key: _referenced(item, name=name, inputs=inputs, notes=notes) for key, item in value.items()}
    if not isinstance(value, str):
        return value
    value = VSCODE_ENV.sub(r"${\1}", value)
    for predefined in VSCODE_PREDEFINED.finditer(value):
        notes.append(
            f"{name}: {predefined.group(0)} is filled in by the client, not by toolkeeper; "
            "write the path it stands for instead."
        )
    for input_id in dict.fromkeys(VSCODE_INPUT.findall(value)):
        variable = variable_for_input(input_id)
        described = inputs.get(input_id)
        notes.append(
            f"{name}: VS Code input {input_id!r}"
            + (f" ({described})" if described else "")
            + f" is now ${{{variable}}}: set {variable} in the environment toolkeeper runs in."
        )
        value = value.replace(f"${{input:{input_id}}}", f"${{{variable}}}")
    return value


def _inputs_of(data: Mapping[str, Any]) -> dict[str, str]:
    """VS Code's `inputs`: each id with its description."""
    found: dict[str, str] = {}
    inputs = data.get("inputs")
    if isinstance(inputs, list):
        for item in inputs:
            if isinstance(item, dict) and isinstance(item.get("id"), str):
                found[item["id"]] = str(item.get("description") or "")
    return found


def is_toolkeeper_entry(entry: Any) -> bool:
    """Whether an entry starts toolkeeper itself (by its command or `python -m toolkeeper`)."""
    if not isinstance(entry, dict) or not isinstance(entry.get("command"), str):
        return False
    args = entry.get("args") or []
    return isinstance(args, list) and starts_toolkeeper(entry["command"], tuple(str(a) for a in args))


def toolkeeper_entries(place: Place | None = None) -> list[tuple[str, Path, str]]:
    """Each client whose user-level file starts toolkeeper: the client's name, the file and the
    command its entry runs. A file that is missing or cannot be read starts nothing."""
    place = place or Place.here()
    found = []
    for client in CLIENTS.values():
        path = client_file(client, place)
        try:
            document = read_client_file(path, jsonc=client.jsonc, missing_ok=True)
            servers = _servers_of(document, client.key) if document is not None else {}
        except ServiceError:
            continue
        for name, entry in servers.items():
            if (name == TOOLKEEPER_ENTRY or is_toolkeeper_entry(entry)) and isinstance(entry, dict):
                command = entry.get("command")
                if isinstance(command, str):
                    found.append((client.name, path, command))
    return found


# -- toolkeeper's own file ----------------------------------------------------------------------


def toolkeeper_config_path(explicit: Path | None) -> Path:
    """The file import writes and install points at: `--config`, then TOOLKEEPER_CONFIG, then the
    user config directory's file (created by the first import; never the bundled demo)."""
    if explicit is not None:
        return explicit.expanduser().absolute()
    from_env = os.environ.get("TOOLKEEPER_CONFIG")
    if from_env:
        return Path(from_env).expanduser().absolute()
    return user_config_path().absolute()


def _read_toolkeeper_config(path: Path) -> tuple[str, dict[str, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return "", {}
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise ServiceError(
            f"{path}: cannot be read ({reason}). Check the file, or pass another with --config."
        ) from None
    try:
        data = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as exc:
        raise ServiceError(
            f"{path}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}. Fix it first."
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("mcpServers", {}), dict):
        raise ServiceError(f'{path}: must be an object like {{"mcpServers": {{...}}}}. Fix it first.')
    return text, data


def quietly_parsed(text: str, path: Path) -> Config:
    """The configuration `text` holds, read as the gateway would; the servers it would skip are
    in `skipped`, not in the log (a command tells them to the person in its own words)."""
    loader_log = logging.getLogger("toolkeeper.config.loader")
    level = loader_log.level
    loader_log.setLevel(logging.ERROR)
    try:
        return parse_config_text(text, path, kinds=KINDS.entries)
    finally:
        loader_log.setLevel(level)


@dataclass(frozen=True)
class ImportResult:
    config: Path
    added: list[str]
    clashes: list[str]  # names toolkeeper's file already uses for a different entry
    unchanged: list[str]  # already there, the same
    skipped: list[str]  # toolkeeper's own entry
    disabled: list[str]
    notes: list[str]
    diff: str
    written: bool


def source_document(source: str, place: Place, *, project: bool = False) -> tuple[ClientDocument, str]:
    """The file `source` names (a client, or a path) as read, and the key of its servers."""
    if source in CLIENTS:
        client = CLIENTS[source]
        path = client_file(client, place, project=project)
        document = read_client_file(path, jsonc=client.jsonc)
        assert document is not None
        key = "servers" if project and client.name == "vscode" else client.key
        return document, key
    path = Path(source).expanduser()
    if not path.exists() and "/" not in source and "\\" not in source and not source.endswith(".json"):
        client_named(source)  # a misspelt client name: refuse naming the clients
    document = read_client_file(path, jsonc=True)
    assert document is not None
    return document, _guess_key(document.data)


def convert_servers(document: ClientDocument, key: str) -> tuple[dict[str, Conversion], list[str]]:
    """Every server of the document in toolkeeper's format, and the names skipped as toolkeeper."""
    inputs = _inputs_of(document.data)
    converted: dict[str, Conversion] = {}
    skipped: list[str] = []
    for name, entry in _servers_of(document, key).items():
        if is_toolkeeper_entry(entry) or not isinstance(entry, dict):
            skipped.append(name)
            continue
        converted[name] = convert_entry(name, entry, inputs)
    return converted, skipped


def import_servers(
    source: str, *, config: Path, place: Place, project: bool = False, dry_run: bool = False
) -> ImportResult:
    """Merge the servers of `source` (a client's file, or any file) into toolkeeper's file.

    1. the source is read (a missing, unreadable or invalid file is refused; nothing is written);
    2. toolkeeper's own entry is skipped;
    3. a name toolkeeper's file already uses for another entry is a clash: reported, kept as it is;
    4. every other server is added as written (disabled ones stay disabled);
    5. the merged file is checked as toolkeeper would read it, then written whole, unless `dry_run`.
    """
    document, key = source_document(source, place, project=project)
    converted, skipped = convert_servers(document, key)
    before_text, data = _read_toolkeeper_config(config)
    servers: dict[str, Any] = dict(data.get("mcpServers", {}))
    added: list[str] = []
    clashes: list[str] = []
    unchanged: list[str] = []
    notes: list[str] = []
    disabled: list[str] = []
    for name, conversion in converted.items():
        if not SERVER_NAME.match(name):
            notes.append(
                f"{name}: not imported; toolkeeper's server names use letters, digits, '_' and '-' "
                "(at most 64). Rename it in the client and import again."
            )
            continue
        if name in servers:
            (unchanged if servers[name] == conversion.entry else clashes).append(name)
            continue
        servers[name] = conversion.entry
        added.append(name)
        notes.extend(conversion.notes)
        if conversion.entry.get("disabled") is True:
            disabled.append(name)
    merged = {**data, "mcpServers": servers} if data else {"mcpServers": servers}
    after_text = json.dumps(merged, indent=2, ensure_ascii=False) + "\n"
    try:
        loaded = quietly_parsed(after_text, config)
    except ConfigError as exc:
        raise ServiceError(f"The merged configuration would not load: {exc}") from None
    for name in added:
        if name in loaded.skipped:
            notes.append(f"{name}: toolkeeper will skip it until this is fixed: {loaded.skipped[name]}.")
    diff = "".join(
        difflib.unified_diff(
            before_text.splitlines(keepends=True),
            after_text.splitlines(keepends=True),
            fromfile=str(config),
            tofile=f"{config} (after import)",
        )
    )
    written = bool(added) and not dry_run
    if written:
        write_atomically(config, after_text.encode("utf-8"))
    return ImportResult(
        config=config,
        added=added,
        clashes=clashes,
        unchanged=unchanged,
        skipped=skipped,
        disabled=disabled,
        notes=notes,
        diff=diff,
        written=written,
    )


# -- writing ------------------------------------------------------------------------------------


def write_atomically(target: Path, content: bytes, *, new_mode: int = 0o600) -> None:
    """Replace `target` with `content` whole or not at all, keeping its permissions (a new file
    gets `new_mode`: these files may hold secrets). A symbolic link is followed: the file it points
    to is replaced, and the link stays a link."""
    target = written_at(target)
    partial = target.with_name(f".{target.name}.{secrets.token_hex(4)}.partial")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        mode = target.stat().st_mode & 0o7777 if target.exists() else new_mode
        partial.write_bytes(content)
        os.chmod(partial, mode)
        os.replace(partial, target)
    except OSError as exc:
        raise ServiceError(
            f"{target}: cannot be written ({exc.strerror or exc}); it is unchanged. "
            "Check its folder's permissions.",
            ErrorKind.STORE,
        ) from None
    finally:
        partial.unlink(missing_ok=True)


def written_at(path: Path) -> Path:
    """Where writing `path` lands: the file a symbolic link points to (through every link), else
    `path` itself."""
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def refuse_read_only(path: Path, *, force: bool) -> None:
    """A client file its owner may not write was made so on purpose (to keep a client's setup
    fixed): it is refused unless `force`. A missing file is not read-only."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return
    if force or mode & stat.S_IWUSR:
        return
    raise ServiceError(
        f"{path} is read-only (mode {stat.S_IMODE(mode):04o}), so toolkeeper leaves it unchanged: "
        "whoever made it so may want the client's setup kept as it is. "
        f"To change it, make it writable first (chmod u+w {written_at(path)}) and try again.",
        ErrorKind.CONFLICT,
        NextStep.FORCE,
    )


def back_up(path: Path, raw: bytes, now: datetime) -> Path:
    """A copy of `raw` beside `path`, named with the time (and a counter if that name is taken),
    readable by whom `path` is."""
    stamp = now.strftime("%Y%m%dT%H%M%S")
    backup = path.with_name(f"{path.name}.toolkeeper-backup-{stamp}")
    counter = 1
    while backup.exists():
        backup = path.with_name(f"{path.name}.toolkeeper-backup-{stamp}-{counter}")
        counter += 1
    write_atomically(backup, raw, new_mode=path.stat().st_mode & 0o7777)
    return backup


def _render(data: Mapping[str, Any]) -> bytes:
    return (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def _sha256(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


# -- install and uninstall ----------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Launch:
    """How a client starts toolkeeper: the absolute command and its arguments."""

    command: str
    args: list[str]


def running_toolkeeper(config: Path) -> Launch:
    """This toolkeeper, by an absolute path: the script it was started as, else the one on PATH,
    else this Python with `-m toolkeeper`."""
    serve = ["serve", "--config", str(config)]
    started_as = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if started_as is not None and started_as.stem == "toolkeeper" and started_as.is_file():
        return Launch(command=str(started_as.absolute()), args=serve)
    on_path = shutil.which("toolkeeper")
    if on_path:
        return Launch(command=str(Path(on_path).absolute()), args=serve)
    return Launch(command=str(Path(sys.executable).absolute()), args=["-m", "toolkeeper", *serve])


def records_dir() -> Path:
    return Path(platformdirs.user_state_dir("toolkeeper")) / "installs"


def _record_path(client_path: Path) -> Path:
    return records_dir() / f"{hashlib.sha256(str(client_path).encode()).hexdigest()[:16]}.json"


@dataclass(frozen=True)
class InstallResult:
    client: str
    file: Path | None  # None: nothing was edited (a command to run is given instead)
    backup: Path | None
    moved: list[str]
    kept: list[str]  # the client's servers left in it, with why in `notes`
    notes: list[str]
    commands: list[str]  # the client's own commands to run, when that is its supported way
    diff: str
    written: bool
    already: bool


def _toolkeeper_entry(client: Client, *, transport: str, config: Path) -> dict[str, Any]:
    if transport == "http":
        url = _served_url(config)
        if client.remote_url_key is None:
            raise ServiceError(
                f"{client.title}'s file starts local (stdio) servers only; install with the stdio transport."
            )
        entry: dict[str, Any] = {client.remote_url_key: url}
        if client.remote_type:
            entry = {"type": client.remote_type, **entry}
        return entry
    launch = running_toolkeeper(config)
    entry = {"command": launch.command, "args": launch.args}
    return {"type": "stdio", **entry} if client.key == "servers" else entry


def _served_url(config: Path) -> str:
    try:
        loaded = quietly_parsed(config.read_text(encoding="utf-8"), config)
        host, port = loaded.settings.http_host, loaded.settings.http_port
    except (OSError, ConfigError):
        host, port = DEFAULT_HTTP_HOST, DEFAULT_HTTP_PORT
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    return f"http://{'[' + host + ']' if ':' in host else host}:{port}/mcp"


def install(
    client_name: str,
    *,
    config: Path,
    place: Place,
    transport: str = "stdio",
    replace_servers: bool = False,
    dry_run: bool = False,
    force: bool = False,
    now: datetime | None = None,
) -> InstallResult:
    """Point a client at toolkeeper.

    1. toolkeeper's file must exist and be a JSON object (import first), else refused;
    2. Claude Code: the `claude mcp` commands to run are returned and nothing is edited;
    3. the client's file is read (a missing one is created if its folder exists, so the client is
       there; else refused, as an invalid one is);
    4. toolkeeper's entry is written under the name `toolkeeper`, replacing an earlier one, never a
       second; a server of the person's already named `toolkeeper` is refused;
    5. with `replace_servers`, each server toolkeeper's file holds the same way leaves the client;
       the others stay, with why;
    6. nothing changes: nothing is written; a read-only file is refused unless `force`; else the
       file is backed up, written whole (where a link points, the link kept), and what was done is
       recorded for `uninstall`.
    """
    client = client_named(client_name)
    _, tk_data = _read_toolkeeper_config(config)
    if not config.exists():
        raise ServiceError(
            f"{config}: no toolkeeper configuration there. Import your servers first "
            f"(`toolkeeper import {client.name}`), or name an existing file with --config.",
            ErrorKind.NOT_FOUND,
        )
    tk_servers: dict[str, Any] = tk_data.get("mcpServers", {})
    entry = _toolkeeper_entry(client, transport=transport, config=config)
    path = client_file(client, place)
    document = read_client_file(path, jsonc=client.jsonc, missing_ok=path.parent.is_dir())
    data: dict[str, Any] = dict(document.data) if document else {}
    servers: dict[str, Any] = dict(_servers_of(document, client.key)) if document else {}
    existing = servers.get(TOOLKEEPER_ENTRY)
    record = _read_record(path)
    ours = existing is None or is_toolkeeper_entry(existing) or existing == entry
    if not ours and (record is None or existing != record.get("entry")):
        raise ServiceError(
            f"{path}: a server named {TOOLKEEPER_ENTRY!r} is already there and does not start toolkeeper. "
            "Rename it in the file first."
        )
    moved: dict[str, Any] = {}
    kept: list[str] = []
    notes: list[str] = []
    if replace_servers:
        converted, _ = convert_servers(document, client.key) if document else ({}, [])
        for name, conversion in converted.items():
            if name == TOOLKEEPER_ENTRY:
                continue
            if tk_servers.get(name) == conversion.entry:
                moved[name] = servers.pop(name)
            else:
                kept.append(name)
                why = (
                    "differs from toolkeeper's entry of that name"
                    if name in tk_servers
                    else "is not in toolkeeper's configuration"
                )
                notes.append(
                    f"{name}: kept in {client.title}: it {why} (`toolkeeper import {client.name}` first)."
                )
    if client.command_line:
        return _claude_code_commands(
            client, entry=entry, moved=moved, kept=kept, notes=notes, transport=transport
        )
    servers[TOOLKEEPER_ENTRY] = entry
    data[client.key] = servers
    after = _render(data)
    before = document.raw if document else b""
    already = document is not None and existing == entry and not moved
    diff = "".join(
        difflib.unified_diff(
            before.decode("utf-8", "replace").splitlines(keepends=True),
            after.decode("utf-8").splitlines(keepends=True),
            fromfile=str(path),
            tofile=f"{path} (after install)",
        )
    )
    if document is not None and document.had_comments and not already:
        notes.append(f"{path}: its comments are not kept in the new file; the backup keeps them.")
    if path.is_symlink() and not already:
        notes.append(f"{path} is a link: {written_at(path)}, where it points, is edited, and the link stays.")
    unwritten = InstallResult(
        client=client.name,
        file=path,
        backup=None,
        moved=list(moved),
        kept=kept,
        notes=notes,
        commands=[],
        diff=diff,
        written=False,
        already=already,
    )
    if already or dry_run:
        return unwritten
    refuse_read_only(path, force=force)
    moment = now or datetime.now()
    backup = back_up(path, before, moment) if document else None
    if record is None:
        record = {
            "client": client.name,
            "file": str(path),
            "backup": str(backup) if backup else None,
            "created": document is None,
            "moved": {},
        }
    record["moved"] = {**record.get("moved", {}), **moved}
    record["installedSha256"] = _sha256(after)
    record["entry"] = entry
    write_atomically(path, after)
    write_atomically(_record_path(path), json.dumps(record, indent=2).encode("utf-8"))
    return replace(unwritten, backup=backup, written=True)


def _claude_code_commands(
    client: Client,
    *,
    entry: dict[str, Any],
    moved: dict[str, Any],
    kept: list[str],
    notes: list[str],
    transport: str,
) -> InstallResult:
    if transport == "http":
        add = [
            "claude",
            "mcp",
            "add",
            "--scope",
            "user",
            "--transport",
            "http",
            TOOLKEEPER_ENTRY,
            entry["url"],
        ]
    else:
        add = [
            "claude",
            "mcp",
            "add",
            "--scope",
            "user",
            TOOLKEEPER_ENTRY,
            "--",
            entry["command"],
            *entry["args"],
        ]
    commands = [shlex.join(["claude", "mcp", "remove", "--scope", "user", name]) for name in moved]
    commands.append(shlex.join(add))
    return InstallResult(
        client=client.name,
        file=None,
        backup=None,
        moved=list(moved),
        kept=kept,
        notes=notes,
        commands=commands,
        diff="",
        written=False,
        already=False,
    )


def _read_record(client_path: Path) -> dict[str, Any] | None:
    try:
        record = json.loads(_record_path(client_path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


@dataclass(frozen=True)
class UninstallResult:
    client: str
    file: Path | None
    restored_from: Path | None  # the backup put back whole
    removed_entry: bool
    restored_servers: list[str]
    notes: list[str]
    commands: list[str]
    backup: Path | None  # the copy of the file before this uninstall changed it


def uninstall(
    client_name: str, *, place: Place, force: bool = False, now: datetime | None = None
) -> UninstallResult:
    """Undo `install`.

    1. Claude Code: the `claude mcp remove` command is returned;
    2. a read-only file is refused unless `force` (forced, it stays read-only);
    3. the file is as install left it: the backup is put back whole (or the file removed, if
       install created it; through a link, the file it points to, and the link stays);
    4. else toolkeeper's entry is removed and the servers install moved out are put back (a name
       the person has reused since is left alone, and said so), after a backup of the file;
    5. no record and no toolkeeper entry: refused, nothing to undo.
    """
    client = client_named(client_name)
    if client.command_line:
        return UninstallResult(
            client=client.name,
            file=None,
            restored_from=None,
            removed_entry=False,
            restored_servers=[],
            notes=[],
            commands=[shlex.join(["claude", "mcp", "remove", "--scope", "user", TOOLKEEPER_ENTRY])],
            backup=None,
        )
    path = client_file(client, place)
    record = _read_record(path)
    document = read_client_file(path, jsonc=client.jsonc, missing_ok=True)
    refuse_read_only(path, force=force)
    if record is not None and document is not None and _sha256(document.raw) == record.get("installedSha256"):
        backup = Path(record["backup"]) if record.get("backup") else None
        if backup is None and record.get("created"):
            written_at(path).unlink()
        else:
            if backup is None or not backup.is_file():
                raise ServiceError(
                    f"{backup or path}: the backup install made is gone; remove the {TOOLKEEPER_ENTRY!r} "
                    f"entry from {path} by hand.",
                    ErrorKind.NOT_FOUND,
                )
            write_atomically(path, backup.read_bytes())
        _record_path(path).unlink(missing_ok=True)
        return UninstallResult(
            client=client.name,
            file=path,
            restored_from=backup,
            removed_entry=True,
            restored_servers=list(record.get("moved", {})),
            notes=[],
            commands=[],
            backup=None,
        )
    if document is None:
        raise ServiceError(
            f"{path}: no such file; toolkeeper is not installed in {client.title}.", ErrorKind.NOT_FOUND
        )
    servers = dict(_servers_of(document, client.key))
    ours = servers.get(TOOLKEEPER_ENTRY)
    recorded_entry = record.get("entry") if record else None
    removed = ours is not None and (is_toolkeeper_entry(ours) or ours == recorded_entry)
    if removed:
        del servers[TOOLKEEPER_ENTRY]
    restored, notes = [], []
    for name, entry in (record or {}).get("moved", {}).items():
        if name in servers:
            notes.append(f"{name}: not put back; {path} has a server of that name now.")
        else:
            servers[name] = entry
            restored.append(name)
    if not removed and not restored:
        raise ServiceError(f"{path}: holds no toolkeeper entry; nothing to uninstall.", ErrorKind.NOT_FOUND)
    backup = back_up(path, document.raw, now or datetime.now())
    write_atomically(path, _render({**document.data, client.key: servers}))
    _record_path(path).unlink(missing_ok=True)
    if document.had_comments:
        notes.append(f"{path}: its comments are not kept in the new file; {backup} keeps them.")
    return UninstallResult(
        client=client.name,
        file=path,
        restored_from=None,
        removed_entry=removed,
        restored_servers=restored,
        notes=notes,
        commands=[],
        backup=backup,
    )

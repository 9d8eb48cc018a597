"""One client entry in toolkeeper's format: the keys toolkeeper reads, the client's variables as
toolkeeper's `${VAR}`, and what a person should know about the change."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from toolkeeper.config.entries import COMMON_KEYS, ENV_REFERENCE
from toolkeeper.config.mcp import PROTOCOL_KEYS, REMOTE_KEYS, STDIO_KEYS, starts_toolkeeper
from toolkeeper.config.model import CREDENTIAL_NAME
from toolkeeper.services.clients.bridges import unbridged
from toolkeeper.services.clients.documents import ClientDocument, servers_of
from toolkeeper.services.clients.remote import is_remote, remote_entry

TOOLKEEPER_ENTRY = "toolkeeper"  # the name toolkeeper's own entry takes in a client's file
KNOWN_ENTRY_KEYS = COMMON_KEYS | STDIO_KEYS | REMOTE_KEYS | PROTOCOL_KEYS
VSCODE_INPUT = re.compile(r"\$\{input:([^}]+)\}")
VSCODE_ENV = re.compile(r"\$\{env:([A-Za-z_][A-Za-z0-9_]*)\}")
# What VS Code fills in itself; toolkeeper would read them as environment variables.
VSCODE_PREDEFINED = re.compile(r"\$\{(workspaceFolder\w*|userHome|pathSeparator|cwd|/)\}")


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
    a note), an mcp-remote bridge becomes the remote entry it stands for, a remote entry's URL,
    type and OAuth hints take toolkeeper's keys, VS Code's `${input:id}` and `${env:NAME}` become
    `${VAR}` references, and literal secrets in `env`, `headers` or `oauth` are kept with a
    warning."""
    conversion = Conversion(entry={})
    entry = unbridged(name, entry, conversion.notes) or entry
    if is_remote(entry):
        entry = remote_entry(name, entry, conversion.notes)
    dropped = []
    for key, value in entry.items():
        if key in KNOWN_ENTRY_KEYS:
            conversion.entry[key] = _referenced(value, name=name, inputs=inputs, notes=conversion.notes)
        else:
            dropped.append(key)
    if dropped:
        conversion.notes.append(
            f"{name}: not kept (toolkeeper does not read them): {', '.join(sorted(dropped))}."
        )
    conversion.notes.extend(_literal_secret_warnings(name, conversion.entry))
    conversion.notes = list(dict.fromkeys(conversion.notes))  # an input used twice is told once
    return conversion


def _literal_secret_warnings(name: str, entry: Mapping[str, Any]) -> list[str]:
    warnings = []
    for section in ("env", "headers", "oauth"):
        values = entry.get(section)
        if not isinstance(values, dict):
            continue
        for key, value in values.items():
            if isinstance(value, str) and _looks_secret(key, value):
                variable = (
                    variable_for_input(f"{name}_client_secret")
                    if section == "oauth"
                    else key.upper().replace("-", "_")
                )
                warnings.append(
                    f"{name}: {section}.{key} holds a literal value that looks like a secret; "
                    "toolkeeper's file "
                    f"keeps it in plain text. Consider writing ${{{variable}}} "
                    "and setting that variable instead."
                )
    return warnings


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


def inputs_of(data: Mapping[str, Any]) -> dict[str, str]:
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


def convert_servers(document: ClientDocument, key: str) -> tuple[dict[str, Conversion], list[str]]:
    """Every server of the document in toolkeeper's format, and the names skipped as toolkeeper."""
    inputs = inputs_of(document.data)
    converted: dict[str, Conversion] = {}
    skipped: list[str] = []
    for name, entry in servers_of(document, key).items():
        if is_toolkeeper_entry(entry) or not isinstance(entry, dict):
            skipped.append(name)
            continue
        converted[name] = convert_entry(name, entry, inputs)
    return converted, skipped

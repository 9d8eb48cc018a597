"""The configuration tools: the MCP face of the toolset service (seeds 000 and 001).

Each tool checks its arguments against its input schema, calls one service function, and
returns the result as JSON text plus `structuredContent`. A refusal of any kind (unknown
toolset, bad reference, a name taken, servers not connected, the store) is a tool error
(`isError`) whose text is the service's message plus, where the service names a next step,
the configuration tool that takes it; so the model can correct itself. The rules live in the
services: where an argument's rule is the service's, the service's message is the one given.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from toolkeeper.annotations.hints import HINTS, PARAM_DESCRIPTION_MAX, TITLE_MAX
from toolkeeper.config.model import DISCOVERY_MODES
from toolkeeper.errors import ErrorKind, NextStep, ServiceError
from toolkeeper.protocol import error_result
from toolkeeper.runtime.menu import Mode, ModeTools
from toolkeeper.toolsets.model import (
    NAME_PATTERN,
    NOTE_NAME_MAX,
    NOTE_TEXT_MAX,
    TOOLSET_NAME_LENGTH,
)

if TYPE_CHECKING:
    from toolkeeper.catalog import CatalogTool
    from toolkeeper.pipeline.call import RemoteAccount, ToolCall
    from toolkeeper.services import Services

logger = logging.getLogger(__name__)

ENTER = "enter-configuration-mode"
EXIT = "exit-configuration-mode"


class ConfigHost(Protocol):
    """What the configuration tools use of the running gateway."""

    @property
    def services(self) -> Services | None: ...

    @property
    def mode_name(self) -> str: ...

    @property
    def toolset_name(self) -> str | None: ...

    @property
    def searching(self) -> bool:
        """Whether normal mode lists find-tools (tool search is on)."""
        ...

    async def set_mode(self, mode: Mode) -> bool:
        """Switch to `mode`; whether anything changed."""
        ...


Handler = Callable[[ConfigHost, dict[str, Any]], Awaitable[dict[str, Any]]]


def _hints(*, read_only: bool, destructive: bool = False, idempotent: bool = True) -> dict[str, Any]:
    # Every configuration tool acts only on toolkeeper's own store and state: a closed world.
    hints: dict[str, Any] = {"readOnlyHint": read_only}
    if not read_only:
        hints["destructiveHint"] = destructive
    hints["idempotentHint"] = idempotent
    hints["openWorldHint"] = False
    return hints


_VALIDATORS: dict[str, Any] = {}


@dataclass(frozen=True)
class ConfigTool:
    name: str
    title: str
    description: str
    properties: dict[str, Any]
    required: tuple[str, ...]
    hints: dict[str, Any]
    run: Handler
    # Arguments the service checks itself (a toolset name): the schema describes them to the
    # client, but a value it rejects goes to the service, whose message is the one given.
    checked_by_service: frozenset[str] = frozenset()
    input_schema: dict[str, Any] = field(init=False)

    def __post_init__(self) -> None:
        schema: dict[str, Any] = {
            "type": "object",
            "properties": self.properties,
            "additionalProperties": False,
        }
        if self.required:
            schema["required"] = list(self.required)
        object.__setattr__(self, "input_schema", schema)

    def _validator(self) -> Any:
        """Built on the tool's first call: jsonschema is not needed to start the gateway, and
        importing it costs a twentieth of start-up."""
        validator = _VALIDATORS.get(self.name)
        if validator is None:
            # jsonschema ships no type information (the types-jsonschema stubs are not a dependency).
            from jsonschema import Draft202012Validator  # type: ignore[import-untyped]

            validator = _VALIDATORS[self.name] = Draft202012Validator(self.input_schema)
        return validator

    def listed(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "inputSchema": self.input_schema,
            "annotations": {"title": self.title, **self.hints},
        }

    async def call(self, gateway: ConfigHost, arguments: dict[str, Any] | None) -> dict[str, Any]:
        arguments = arguments or {}
        errors = sorted(
            (
                e
                for e in self._validator().iter_errors(arguments)
                if not (e.path and e.path[0] in self.checked_by_service)
            ),
            key=lambda e: list(e.path),
        )
        if errors:
            lines = [f"{'/'.join(str(p) for p in e.path) or '(arguments)'}: {e.message}" for e in errors[:5]]
            return error_result(f"Invalid arguments for {self.name}:\n" + "\n".join(lines))
        try:
            result = await self.run(gateway, arguments)
        except ServiceError as exc:
            if exc.kind is ErrorKind.STORE:
                # The person running the gateway must hear of it too, not only the model; the
                # message says everything, so no traceback.
                logger.error("%s: %s", self.name, exc)
            return refusal(exc)
        return {
            "content": [{"type": "text", "text": json.dumps(result, indent=2, ensure_ascii=False)}],
            "structuredContent": result,
        }


# The next steps a service names, as the configuration tools take them.
NEXT_STEPS: dict[NextStep, str] = {
    NextStep.CONFIRM: "Set confirm: true to go ahead.",
    NextStep.OVERWRITE: "Set overwrite: true to replace it.",
    NextStep.EQUIP_TOOLSET: "Use equip-toolset to load a toolset first.",
    NextStep.BUILD_TOOLSET: "Use build-toolset to create one.",
    NextStep.LIST_TOOLS: "Use list-available-tools to see available tools.",
    # No configuration tool restores a backup: only a person at the command line can go past the limit.
    NextStep.RAISE_LIMIT: "A person can allow a larger file with `toolkeeper restore --max-size`.",
    # No configuration tool edits a client's file: only a person at the command line can force it.
    NextStep.FORCE: "A person can write it anyway with the command's --force.",
}


def refusal(error: ServiceError) -> dict[str, Any]:
    """A refused service request as a tool result. Every kind is an `isError` result: the model
    reads the text and corrects itself; the protocol-level error is for malformed requests."""
    text = str(error)
    if error.next_step is not None:
        text += " " + NEXT_STEPS[error.next_step]
    return error_result(text)


def _services(gateway: ConfigHost) -> Services:
    if gateway.services is None:
        raise ServiceError(
            "Toolsets, hints and rules need the store, and this gateway runs without one.",
            ErrorKind.UNAVAILABLE,
        )
    return gateway.services


# -- argument schemas ---------------------------------------------------------------------

TOOLSET_NAME = {
    "type": "string",
    "description": "Name of the toolset (lowercase letters, numbers and hyphens, e.g. 'dev-essentials')",
    "pattern": NAME_PATTERN,
    "minLength": TOOLSET_NAME_LENGTH[0],
    "maxLength": TOOLSET_NAME_LENGTH[1],
}
NAMESPACED_NAME = {
    "type": "string",
    "description": "Tool reference by namespaced name, '<server>.<tool>' (e.g., 'linear.create_issue')",
}
REF_ID = {
    "type": "string",
    "description": "Tool reference by unique hash identifier (the refId shown by list-available-tools)",
}
TOOL_REF = {
    "type": "object",
    "description": "Reference to the tool (use namespacedName or refId)",
    "properties": {"namespacedName": NAMESPACED_NAME, "refId": REF_ID},
    "anyOf": [{"required": ["namespacedName"]}, {"required": ["refId"]}],
    "additionalProperties": False,
}
NOTES = {
    "type": "array",
    "description": "Array of annotations to add to the tool",
    "items": {
        "type": "object",
        "properties": {
            "name": {
                "type": "string",
                "description": "Identifier for this annotation (e.g., 'usage-with-project')",
                "pattern": NAME_PATTERN,
                "maxLength": NOTE_NAME_MAX,
            },
            "note": {
                "type": "string",
                "description": "The annotation content to help guide LLM usage",
                "minLength": 1,
                "maxLength": NOTE_TEXT_MAX,
            },
        },
        "required": ["name", "note"],
    },
    "minItems": 1,
}


# The toolset name's rule is the service's (check_toolset_name); the schema only describes it.
NAME_CHECKED = frozenset({"name"})


# -- handlers -----------------------------------------------------------------------------


async def _list_available(gateway: ConfigHost, args: dict[str, Any]) -> dict[str, Any]:
    result = await _services(gateway).toolsets.available_tools()
    hints = await _services(gateway).hints.briefs()
    for server in result["toolsByServer"]:
        for tool in server["tools"]:
            tool["hints"] = hints.get(tool["namespacedName"])
    return result


async def _build(gateway: ConfigHost, args: dict[str, Any]) -> dict[str, Any]:
    # A model is not a person: its toolsets take the confirm modes a person set elsewhere.
    return await _services(gateway).toolsets.build(
        args["name"],
        args["tools"],
        args.get("description", ""),
        bool(args.get("autoEquip", False)),
        by_person=False,
        discovery=args.get("discovery", "off"),
    )


async def _list_saved(gateway: ConfigHost, args: dict[str, Any]) -> dict[str, Any]:
    return await _services(gateway).toolsets.saved()


async def _equip(gateway: ConfigHost, args: dict[str, Any]) -> dict[str, Any]:
    return await _services(gateway).toolsets.equip(args["name"])


async def _unequip(gateway: ConfigHost, args: dict[str, Any]) -> dict[str, Any]:
    return await _services(gateway).toolsets.unequip()


async def _delete(gateway: ConfigHost, args: dict[str, Any]) -> dict[str, Any]:
    return await _services(gateway).toolsets.delete(
        args["name"], confirm=args.get("confirm") is True, by_person=False
    )


async def _active(gateway: ConfigHost, args: dict[str, Any]) -> dict[str, Any]:
    return {**await _services(gateway).toolsets.active(), "mode": gateway.mode_name}


async def _add_notes(gateway: ConfigHost, args: dict[str, Any]) -> dict[str, Any]:
    return await _services(gateway).toolsets.add_notes(args["toolRef"], args["notes"])


async def _remove_notes(gateway: ConfigHost, args: dict[str, Any]) -> dict[str, Any]:
    return await _services(gateway).toolsets.remove_notes(args["toolRef"], args["names"])


async def _export(gateway: ConfigHost, args: dict[str, Any]) -> dict[str, Any]:
    return await _services(gateway).toolsets.export(args["name"])


async def _import(gateway: ConfigHost, args: dict[str, Any]) -> dict[str, Any]:
    return await _services(gateway).toolsets.import_toolset(
        args["toolset"], args.get("name"), bool(args.get("overwrite")), by_person=False
    )


async def _set_hints(gateway: ConfigHost, args: dict[str, Any]) -> dict[str, Any]:
    # A model may pin hints that make a tool look riskier, never ones that spare a question.
    return await _services(gateway).hints.set(
        args["toolRef"],
        args.get("hints"),
        args.get("parameters"),
        args.get("toolset"),
        args.get("accept"),
        by_person=False,
    )


async def _set_rules(gateway: ConfigHost, args: dict[str, Any]) -> dict[str, Any]:
    return await _services(gateway).rules.replace(args["toolRef"], args["rules"], by_person=False)


async def _set_confirm(gateway: ConfigHost, args: dict[str, Any]) -> dict[str, Any]:
    # A model is not a person: the service lets it only make confirmation stricter, and never
    # write the text the person reads when asked.
    return await _services(gateway).policy.set_confirm_mode(
        args["tool"], args["mode"], toolset=args.get("toolset"), by_person=False
    )


async def _explain_policy(gateway: ConfigHost, args: dict[str, Any]) -> dict[str, Any]:
    return await _services(gateway).policy.explain(args["tool"], args.get("arguments"))


async def _enter(gateway: ConfigHost, args: dict[str, Any]) -> dict[str, Any]:
    changed = await gateway.set_mode(Mode.CONFIGURATION)
    return {
        "success": True,
        "currentMode": Mode.CONFIGURATION.value,
        "changed": changed,
        "message": "Entered configuration mode. Configuration tools are now listed."
        if changed
        else "Already in configuration mode; nothing changed.",
        "availableTools": [t.name for t in CONFIG_TOOLS],
    }


async def _exit(gateway: ConfigHost, args: dict[str, Any]) -> dict[str, Any]:
    changed = await gateway.set_mode(Mode.NORMAL)
    toolset = gateway.toolset_name
    message = "Returned to normal mode." if changed else "Already in normal mode; nothing changed."
    if toolset:
        message += f" Listing the tools of toolset '{toolset}'"
        message += ", and find-tools to find more." if gateway.searching else "."
    elif gateway.searching:
        message += " No toolset is equipped: find-tools finds the tools you need, and adds them to your list."
    else:
        message += " No toolset is equipped, so only enter-configuration-mode is listed."
    return {
        "success": True,
        "currentMode": Mode.NORMAL.value,
        "changed": changed,
        "equippedToolset": toolset,
        "message": message,
    }


CONFIG_TOOLS: tuple[ConfigTool, ...] = (
    ConfigTool(
        "list-available-tools",
        "List Available Tools",
        "Discover all tools available from connected MCP servers, grouped by server, for building toolsets. "
        "Each tool can be referenced by 'namespacedName' (e.g., 'git.status') or 'refId' (unique hash). "
        "Each tool's hints give every field's effective value and its source (pinned, declared, "
        "declared-untrusted, method, inferred, default), with the gateway's suggestion for a gap. "
        "Each tool's tokens estimate what its definition costs your context as listed now; costs gives "
        "the totals (listed now, and the whole catalog) and the encoding.",
        {},
        (),
        _hints(read_only=True),
        _list_available,
    ),
    ConfigTool(
        "build-toolset",
        "Build Toolset",
        "Build and save a toolset: a named selection of tools. Each tool is given by namespacedName or "
        "refId (see list-available-tools). With autoEquip: true the new toolset is equipped at once and "
        "the gateway returns to normal mode. A tool confirmed in another toolset is confirmed at least as "
        "strictly in this one. Example: {name: 'dev-essentials', tools: "
        "[{namespacedName: 'git.status'}], autoEquip: true}",
        {
            "name": {
                **TOOLSET_NAME,
                "description": "Name for the new toolset. Use lowercase with hyphens "
                "(e.g., 'dev-essentials', 'git-workflow')",
            },
            "tools": {
                "type": "array",
                "description": "Tools to include. Each gives namespacedName or refId; use "
                "list-available-tools to see the options.",
                "minItems": 1,
                "items": {**TOOL_REF, "description": "One tool, by namespacedName or refId"},
            },
            "description": {
                "type": "string",
                "description": "What this toolset is for (e.g., 'Essential tools for web development')",
                "maxLength": 500,
            },
            "autoEquip": {
                "type": "boolean",
                "description": "Equip the toolset right after creating it (default: false)",
            },
            "discovery": {
                "type": "string",
                "enum": list(DISCOVERY_MODES),
                "description": "'search' lists find-tools beside the toolset's tools, which adds the "
                "tools it finds to the caller's own list (default: 'off')",
            },
        },
        ("name", "tools"),
        _hints(read_only=False, idempotent=False),
        _build,
        checked_by_service=NAME_CHECKED,
    ),
    ConfigTool(
        "list-saved-toolsets",
        "List Saved Toolsets",
        "List every saved toolset with its tools, notes, which one is equipped, and each tool's status "
        "(ok, changed: its schema changed since it was added, unavailable: its server is down or gone).",
        {},
        (),
        _hints(read_only=True),
        _list_saved,
    ),
    ConfigTool(
        "equip-toolset",
        "Equip Toolset",
        "Equip a saved toolset: normal mode then lists exactly its tools (with their notes). Returns to "
        "normal mode on success. The choice is remembered across restarts.",
        {"name": {**TOOLSET_NAME, "description": "Name of the toolset to equip"}},
        ("name",),
        _hints(read_only=False),
        _equip,
        checked_by_service=NAME_CHECKED,
    ),
    ConfigTool(
        "unequip-toolset",
        "Unequip Toolset",
        "Unequip the current toolset. Normal mode then lists no server tools until another toolset "
        "is equipped.",
        {},
        (),
        _hints(read_only=False),
        _unequip,
    ),
    ConfigTool(
        "delete-toolset",
        "Delete Toolset",
        "Delete a saved toolset and its notes. Requires confirm: true. Deleting the equipped toolset "
        "unequips it. A toolset that holds confirm modes or hint pins cannot be deleted here.",
        {
            "name": {**TOOLSET_NAME, "description": "Name of the toolset to delete"},
            "confirm": {"type": "boolean", "description": "Must be true to actually delete"},
        },
        ("name",),
        _hints(read_only=False, destructive=True),
        _delete,
        checked_by_service=NAME_CHECKED,
    ),
    ConfigTool(
        "get-active-toolset",
        "Get Active Toolset",
        "Show the equipped toolset: its tools with their status (ok, changed, unavailable), the exposed "
        "tool names, its notes, the current mode, and the estimated tokens of its tools' definitions "
        "(tokens) against the whole catalog's (costs).",
        {},
        (),
        _hints(read_only=True),
        _active,
    ),
    ConfigTool(
        "add-tool-annotation",
        "Add Tool Annotation",
        "Add contextual annotations to a tool in the current toolset to guide LLM usage. The notes are "
        "appended to the tool's description. Existing annotation names are kept and skipped. Example: "
        "{toolRef: {namespacedName: 'linear.create_issue'}, notes: [{name: 'team-selection', note: "
        "'Always confirm the team with the user first'}]}",
        {"toolRef": TOOL_REF, "notes": NOTES},
        ("toolRef", "notes"),
        _hints(read_only=False),
        _add_notes,
    ),
    ConfigTool(
        "remove-tool-annotation",
        "Remove Tool Annotation",
        "Remove annotations, by name, from a tool in the current toolset.",
        {
            "toolRef": TOOL_REF,
            "names": {
                "type": "array",
                "description": "Names of the annotations to remove (e.g., ['usage-with-project'])",
                "items": {"type": "string", "pattern": NAME_PATTERN, "maxLength": NOTE_NAME_MAX},
                "minItems": 1,
            },
        },
        ("toolRef", "names"),
        _hints(read_only=False, destructive=True),
        _remove_notes,
    ),
    ConfigTool(
        "export-toolset",
        "Export Toolset",
        "Export a saved toolset, with its notes, as JSON that import-toolset (or `toolkeeper toolsets "
        "import`) reads back.",
        {"name": {**TOOLSET_NAME, "description": "Name of the toolset to export"}},
        ("name",),
        _hints(read_only=True),
        _export,
        checked_by_service=NAME_CHECKED,
    ),
    ConfigTool(
        "import-toolset",
        "Import Toolset",
        "Import a toolset from JSON as produced by export-toolset (a hypertool toolset also works). "
        "Refuses an existing name unless overwrite is true; a toolset that holds confirm modes or hint "
        "pins cannot be replaced here.",
        {
            "toolset": {
                "type": "object",
                "description": "The exported toolset: {name, description, tools: [{namespacedName, refId}], "
                "toolNotes: [{toolRef, notes: [{name, note}]}]}",
            },
            "name": {**TOOLSET_NAME, "description": "Save it under this name instead of the one in the JSON"},
            "overwrite": {
                "type": "boolean",
                "description": "Replace a saved toolset of the same name (default: false)",
            },
        },
        ("toolset",),
        _hints(read_only=False, destructive=True, idempotent=False),
        _import,
        checked_by_service=NAME_CHECKED,
    ),
    ConfigTool(
        "set-tool-hints",
        "Set Tool Hints",
        "Pin a tool's behaviour hints, title or parameter descriptions, overriding what its server "
        "declared; null clears a pin so the tool inherits again. Pins are global unless a toolset is "
        "given (then they hold while it is equipped). 'accept' pins the gateway's inferred suggestions "
        "(see list-available-tools). Here a hint can only be pinned to its cautious value (readOnlyHint "
        "false, destructiveHint true, idempotentHint false, openWorldHint true), and such a pin cannot be "
        "cleared. Example: {toolRef: {namespacedName: 'notes.update_note'}, hints: "
        "{readOnlyHint: false, destructiveHint: true}}",
        {
            "toolRef": TOOL_REF,
            "hints": {
                "type": "object",
                "description": "Fields to pin: title (text) and the four hints (true/false); "
                "null clears a pin",
                "properties": {
                    "title": {
                        "type": ["string", "null"],
                        "description": "Human-readable title clients show instead of the name",
                        "minLength": 1,
                        "maxLength": TITLE_MAX,
                    },
                    **{
                        hint: {"type": ["boolean", "null"], "description": description}
                        for hint, description in zip(
                            HINTS,
                            (
                                "true if the tool changes nothing",
                                "true if it may delete or overwrite data (when not read-only)",
                                "true if repeating the call with the same arguments changes nothing more",
                                "true if it reaches beyond a closed set of things (the web, other people)",
                            ),
                            strict=True,
                        )
                    },
                },
                "additionalProperties": False,
            },
            "parameters": {
                "type": "object",
                "description": "Parameter descriptions to pin, by parameter name; null clears a pin",
                "additionalProperties": {
                    "type": ["string", "null"],
                    "minLength": 1,
                    "maxLength": PARAM_DESCRIPTION_MAX,
                },
            },
            "accept": {
                "type": "array",
                "description": "Inferred suggestions to pin: field names such as 'readOnlyHint' or "
                "'param:category', or ['all'] for every gap that has a suggestion",
                "items": {"type": "string"},
                "minItems": 1,
            },
            "toolset": {**TOOLSET_NAME, "description": "Pin only for this toolset (default: a global pin)"},
        },
        ("toolRef",),
        _hints(read_only=False, destructive=True),
        _set_hints,
        checked_by_service=frozenset({"toolset"}),
    ),
    ConfigTool(
        "set-argument-rules",
        "Set Argument Rules",
        "Replace a tool's argument rules: ordered conditions over its arguments and the hints that hold "
        "when one matches (first match wins; no match: the static hints). Clients get these through "
        "tools/resolve and tools/annotations. A rule may not be riskier than the static hints, and here "
        "it may only give the cautious values (readOnlyHint false, destructiveHint true, idempotentHint "
        "false, openWorldHint true): a rule that spares a question is a person's to write. An empty "
        "list removes them all. Example: {toolRef: {namespacedName: 'files.manage_files'}, rules: []}",
        {
            "toolRef": TOOL_REF,
            "rules": {
                "type": "array",
                "description": "The tool's rules in order; [] removes them all",
                "items": {
                    "type": "object",
                    "description": "One rule: when (a condition) and hints (what holds then)",
                    "properties": {
                        "when": {
                            "type": "object",
                            "description": "argument (top-level name) or pointer (JSON pointer), and one of "
                            "equals (any value), in (a list), matches (a regular expression), present (bool)",
                        },
                        "hints": {
                            "type": "object",
                            "description": "The hints that hold when the condition matches, e.g. "
                            "{readOnlyHint: true, destructiveHint: false}",
                        },
                    },
                    "required": ["when", "hints"],
                    "additionalProperties": False,
                },
            },
        },
        ("toolRef", "rules"),
        _hints(read_only=False, destructive=True),
        _set_rules,
    ),
    ConfigTool(
        "set-tool-confirm",
        "Set Tool Confirmation",
        "Have a person confirm a tool's calls: 'always' (every call), 'session' (the first call in each "
        "client session; a yes holds for the rest of it) or 'deny' (never run it). Global unless a "
        "toolset is given; tool '*' with a toolset sets that toolset's default. A mode can only be made "
        "stricter here. Example: {tool: 'files.manage_files', mode: 'always'}",
        {
            "tool": {
                "type": "string",
                "description": "The tool's namespacedName ('server.tool') or exposed name; '*' with a "
                "toolset for that toolset's default",
                "minLength": 1,
            },
            "mode": {
                "type": "string",
                "enum": ["always", "session", "deny"],
                "description": "always: confirm every call; session: confirm once per client session; "
                "deny: never run the tool",
            },
            "toolset": {
                **TOOLSET_NAME,
                "description": "Only for its tools as this toolset lists them: equipped, or a client key's "
                "toolset (default: global)",
            },
        },
        ("tool", "mode"),
        _hints(read_only=False, destructive=True),
        _set_confirm,
        checked_by_service=frozenset({"mode", "toolset"}),
    ),
    ConfigTool(
        "explain-tool-policy",
        "Explain Tool Policy",
        "Say what the approval policy decides for a call of a tool with these arguments (allow, ask or "
        "deny), what made the decision and why, the confirm mode in force, and each behaviour hint it used "
        "with its source. Nothing is called. Example: {tool: 'files.manage_files', arguments: {path: "
        "'a.txt', action: 'delete'}}",
        {
            "tool": {
                "type": "string",
                "description": "The tool's namespacedName ('server.tool') or exposed name",
                "minLength": 1,
            },
            "arguments": {"type": "object", "description": "The call's arguments (default: none)"},
        },
        ("tool",),
        _hints(read_only=True),
        _explain_policy,
    ),
    ConfigTool(
        EXIT,
        "Exit Configuration Mode",
        "Leave configuration mode and return to normal mode: the equipped toolset's tools are listed again "
        "(or only enter-configuration-mode when no toolset is equipped). Does nothing in normal mode.",
        {},
        (),
        _hints(read_only=False),
        _exit,
    ),
)

ENTER_TOOL = ConfigTool(
    ENTER,
    "Enter Configuration Mode",
    "Switch to configuration mode to manage toolsets and tool annotations. The tool list then shows only "
    "the configuration tools (list-available-tools, build-toolset, list-saved-toolsets, equip-toolset, "
    "unequip-toolset, delete-toolset, get-active-toolset, add-tool-annotation, remove-tool-annotation, "
    "export-toolset, import-toolset, set-tool-hints, set-argument-rules, set-tool-confirm, "
    "explain-tool-policy, exit-configuration-mode) and hides "
    "the working tools until you exit or equip a toolset. Does nothing if already in configuration mode.",
    {},
    (),
    _hints(read_only=False),
    _enter,
)

BY_NAME: dict[str, ConfigTool] = {t.name: t for t in (*CONFIG_TOOLS, ENTER_TOOL)}
MODE_TOOLS = frozenset({ENTER, EXIT})


@dataclass(frozen=True, slots=True)
class BoundConfigTool:
    """A configuration tool bound to the gateway it configures: a pipeline target."""

    spec: ConfigTool
    host: ConfigHost

    @property
    def exposed_name(self) -> str:
        return self.spec.name

    @property
    def tool(self) -> CatalogTool | None:
        return None  # the gateway's own: no downstream tool behind it

    @property
    def toolset(self) -> str | None:
        return None

    def needs_client(self, call: ToolCall) -> bool:
        return False  # runs in-process

    def remote_account(self, call: ToolCall) -> RemoteAccount | None:
        return None

    async def forward(self, call: ToolCall) -> dict[str, Any]:
        return await self.spec.call(self.host, call.params.get("arguments"))

    def listed(self) -> dict[str, Any]:
        return self.spec.listed()


class ConfigMenu:
    """The configuration tools as the running gateway's menu (seed 001's modes): all of them in
    configuration mode, only enter-configuration-mode beside the toolset's tools in normal mode,
    and every one but the mode tools when the person turned the menu off."""

    def __init__(self, host: ConfigHost) -> None:
        bound = {name: BoundConfigTool(spec, host) for name, spec in BY_NAME.items()}
        all_tools = tuple(bound[t.name] for t in CONFIG_TOOLS)
        self._modes = {
            None: ModeTools(before=tuple(t for t in all_tools if t.exposed_name not in MODE_TOOLS)),
            # Entering the mode one is in is a harmless no-op, so it stays callable.
            Mode.CONFIGURATION: ModeTools(before=all_tools, unlisted=(bound[ENTER],)),
            Mode.NORMAL: ModeTools(after=(bound[ENTER],), unlisted=(bound[EXIT],)),
        }

    def names(self) -> frozenset[str]:
        return frozenset(BY_NAME)

    def in_mode(self, mode: Mode | None) -> ModeTools:
        return self._modes[mode]

    def why_hidden(self, name: str, mode: Mode | None) -> str | None:
        if name not in BY_NAME:
            return None
        if mode is None and name in MODE_TOOLS:
            return f"'{name}' is not available: configuration mode is off (enableConfigToolsMenu=false)."
        return f"'{name}' is a configuration tool, listed only in configuration mode. Call {ENTER} first."

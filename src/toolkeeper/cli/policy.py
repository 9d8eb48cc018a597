"""`toolkeeper policy explain|confirm|modes`: thin faces over services/policy.py. A person runs
these, so a confirm mode may be relaxed or cleared here (the MCP face may only tighten)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from toolkeeper.cli.common import (
    ConfigOption,
    DemoOption,
    JsonOption,
    WaitOption,
    app,
    err,
    json_argument,
    load,
    new_table,
    out,
    print_json,
    print_warnings,
    styled,
)
from toolkeeper.cli.operations import run_service

policy_app = typer.Typer(
    help="The approval policy: what it decides for a call, and how each tool's calls are confirmed.",
    no_args_is_help=True,
)
app.add_typer(policy_app, name="policy")

DECISION_STYLE = {"allow": "green", "ask": "yellow", "deny": "red"}
# Who made the toolset a tool is listed under: a person's keeps its own confirm modes.
_MAKERS = {
    "person": "a person (its own confirm modes hold)",
    "model": "the model (a mode set for a tool in another toolset follows it here)",
}


def _mode_text(mode: dict[str, Any] | None) -> str:
    if mode is None:
        return "none (the hints decide)"
    text = f"{mode['mode']} (set for {mode['setFor']}"
    text += f", {mode['followed']})" if mode.get("followed") else ")"
    return text + (f": {mode['text']}" if mode.get("text") else "")


@policy_app.command("explain")
def policy_explain(
    tool: str = typer.Argument(..., help="The tool (server.tool or its exposed name)."),
    arguments: str = typer.Argument("{}", help='The arguments as JSON, e.g. \'{"action": "read"}\'.'),
    config: Path | None = ConfigOption,
    demo: bool = DemoOption,
    as_json: bool = JsonOption,
    wait: float = WaitOption,
) -> None:
    """What the policy decides for a call with these arguments (allow, ask or deny), the rule or
    setting that made the decision, why, and the four hints it used with their sources. Nothing is
    called; rules given for one client session are not considered."""
    parsed = json_argument(arguments, "the arguments")
    result = run_service(
        load(config, demo), lambda s: s.explain(tool, parsed), live=True, wait=wait, kind="policy"
    )
    if as_json:
        print_json(result)
        return
    decision = result["decision"]
    out.print(styled(f"{result['tool']} {json.dumps(parsed, ensure_ascii=False)}"), soft_wrap=True)
    out.print(
        styled(
            "  decision: ", (decision, f"bold {DECISION_STYLE[decision]}"), f"  (made by {result['madeBy']})"
        )
    )
    out.print(styled(f"  reason: {result['reason']}"))
    out.print(styled(f"  confirm mode: {_mode_text(result['confirmMode'])}"))
    if result["toolset"] is not None:
        out.print(
            styled(
                f"  listed under: toolset '{result['toolset']}', made by {_MAKERS[result['toolsetMadeBy']]}"
            )
        )
    trust = "trusted" if result["server"]["trusted"] else "untrusted"
    resolution = result["resolution"]
    out.print(
        styled(
            f"  server: {result['server']['name']} ({trust}); hints: {resolution['source']} "
            f"({resolution['detail']})"
        )
    )
    table = new_table("hint", "value", "source")
    for hint, entry in result["hints"].items():
        table.add_row(hint, str(entry["value"]).lower(), entry["source"] or "")
    out.print(table)


@policy_app.command("confirm")
def policy_confirm(
    tool: str = typer.Argument(
        ..., help="The tool (server.tool or its exposed name), or '*' with --toolset for its default."
    ),
    mode: str | None = typer.Argument(
        None,
        help="always (every call), session (once per client session), never (do not ask), deny (never run).",
    ),
    text: str | None = typer.Option(None, "--text", help="What the person reads when a call is asked about."),
    toolset: str | None = typer.Option(
        None,
        "--toolset",
        help="Only for its tools as this toolset lists them (equipped, or a client key's toolset); "
        "it wins then. Default: global.",
    ),
    clear: bool = typer.Option(False, "--clear", help="Remove the mode: the next one in line holds again."),
    config: Path | None = ConfigOption,
    demo: bool = DemoOption,
    as_json: bool = JsonOption,
) -> None:
    """Set how a tool's calls are confirmed, or --clear it (works with the servers offline; give the
    tool as server.tool then). A mode for a toolset wins over the tool's global mode while it is
    equipped; the toolset's '*' covers its tools that have no mode of their own."""
    if clear == (mode is not None):
        err.print("error: give a MODE, or --clear (not both).", markup=False)
        raise typer.Exit(1)
    if clear and text is not None:
        err.print("error: --text goes with a MODE, not with --clear.", markup=False)
        raise typer.Exit(1)
    if clear:
        result = run_service(
            load(config, demo),
            lambda s: s.clear_confirm_mode(tool, toolset, by_person=True),
            kind="policy",
        )
        if as_json:
            print_json(result)
            return
        out.print(
            styled(
                f"Cleared the confirm mode of {result['tool']} ({result['scope']}). "
                f"In force now: {_mode_text(result['now'])}."
            )
        )
        return
    result = run_service(
        load(config, demo),
        lambda s: s.set_confirm_mode(tool, mode, text, toolset, by_person=True),
        kind="policy",
    )
    if as_json:
        print_json(result)
        return
    print_warnings(result)
    out.print(
        styled(
            f"{result['tool']} ({result['scope']}): confirm mode {result['mode']}"
            + (f", text: {result['text']}" if result["text"] else "")
            + f" (before: {_mode_text(result['before'])})."
        )
    )


@policy_app.command("modes")
def policy_modes(
    config: Path | None = ConfigOption, demo: bool = DemoOption, as_json: bool = JsonOption
) -> None:
    """Every stored confirm mode, and the modes the configuration sets (a server's `confirm`, the
    gateway's `confirm`)."""
    result = run_service(load(config, demo), lambda s: s.confirm_modes(), kind="policy")
    if as_json:
        print_json(result)
        return
    configured = result["configured"]
    if not result["modes"]:
        out.print("No confirm modes are stored: the approval policy decides from the hints.", highlight=False)
    else:
        table = new_table(
            "tool",
            "scope",
            "mode",
            "text",
            title="confirm modes (a toolset's mode wins while it is equipped)",
        )
        for entry in result["modes"]:
            tool = "* (every tool)" if entry["tool"] == "*" else entry["tool"]
            table.add_row(tool, entry["scope"], entry["mode"], entry["text"] or "")
        out.print(table)
    for server, mode in configured["servers"].items():
        out.print(styled(f"configuration: server '{server}' confirm {mode}"))
    if configured["default"]:
        out.print(
            f"configuration: confirm {configured['default']} for every other tool",
            markup=False,
            highlight=False,
        )

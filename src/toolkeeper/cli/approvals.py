"""`toolkeeper approvals list|approve|deny|watch|rules|add-rule|revoke`: a person's side of the approval
gate (thin faces over services/approvals.py and services/policy.py)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from toolkeeper.cli.common import (
    ConfigOption,
    DemoOption,
    JsonOption,
    app,
    err,
    json_argument,
    load,
    new_table,
    out,
    print_json,
    styled,
)
from toolkeeper.cli.operations import run_service
from toolkeeper.display import visible_line
from toolkeeper.policy.model import Answer

if TYPE_CHECKING:
    from rich.text import Text

approvals_app = typer.Typer(
    help="Calls waiting for a person's yes or no, and the approval rules your answers made.",
    no_args_is_help=True,
)
app.add_typer(approvals_app, name="approvals")

CLI_CHANNEL = "cli"  # the face recorded with each answer given here
BY_CLI = f"person via {CLI_CHANNEL}"  # who answered, as the records show it


def _when(iso: str | None) -> str:
    if not iso:
        return ""
    moment = datetime.fromisoformat(iso)
    seconds = int((datetime.now(UTC) - moment).total_seconds())
    if seconds < 0:
        return f"in {-seconds} s"
    return f"{seconds} s ago" if seconds < 120 else f"{seconds // 60} min ago"


def _client_label(client: dict[str, Any]) -> str:
    return " ".join(str(part) for part in (client.get("name"), client.get("version")) if part)


def _who(call: dict[str, Any]) -> str:
    """Who waits, as people read it: the principal the gateway let in, then the client it used
    (`alice with claude-code 1.2`); a call queued before principals were recorded has only its client."""
    client = _client_label(call["client"]) or "an unnamed client"
    return f"{call['principal']} with {client}" if call.get("principal") else client


def _what(call: dict[str, Any]) -> Text:
    """The call cell: the sentence, toolkeeper's warnings, and what the server claims as its own."""
    shown = styled(call["sentence"] or "")
    for warning in call["warnings"]:
        shown.append_text(styled("\n", (f"⚠ {warning}", "yellow")))
    if call.get("claims"):
        shown.append_text(styled("\n", (f"the server claims: {', '.join(call['claims'])}", "dim")))
    return shown


def _print_calls(calls: list[dict[str, Any]], *, include_decided: bool) -> None:
    if not calls:
        out.print("No call is waiting for approval." if not include_decided else "No approvals yet.")
        return
    table = new_table("id", "tool", "call", "who", "asked", "status", title="Calls waiting for approval")
    for call in calls:
        status = call["status"]
        if status == "pending":
            status = f"waits (expires {_when(call['expiresAt'])})"
        elif call.get("decidedBy"):
            status += f" by {call['decidedBy']}"
        if call.get("ranBy"):
            status += f", ran by {call['ranBy']}"
        table.add_row(call["id"], call["tool"], _what(call), _who(call), _when(call["createdAt"]), status)
    out.print(table)
    if any(call["status"] == "pending" for call in calls):
        out.print(
            "Answer with [bold]toolkeeper approvals approve ID[/bold] [--session | --always] "
            "or [bold]toolkeeper approvals deny ID[/bold] [--reason TEXT]."
        )


LIST_LIMIT = 100  # how many calls `list` shows unless told otherwise


@approvals_app.command("list")
def approvals_list(
    include_decided: bool = typer.Option(
        False, "--all", help="Also show decided, expired and not-run calls."
    ),
    limit: int = typer.Option(
        LIST_LIMIT, "--limit", min=0, help="Show at most this many calls, newest first (0: all)."
    ),
    config: Path | None = ConfigOption,
    demo: bool = DemoOption,
    as_json: bool = JsonOption,
) -> None:
    """Calls waiting for an answer (newest first), with their IDs."""
    page = run_service(
        load(config, demo),
        lambda s: s.page(include_decided=include_decided, limit=limit or None),
        kind="approvals",
    )
    calls, total = page["calls"], page["total"]
    if as_json:
        print_json(calls)
    else:
        _print_calls(calls, include_decided=include_decided)
    if total > len(calls):
        # On stderr with --json, so that the list stays a list.
        (err if as_json else out).print(
            f"Showing the newest {len(calls)} of {total} calls; `--limit 0` shows them all.", highlight=False
        )


def _answer(session: bool, always: bool) -> Answer:
    if session and always:
        err.print("error: choose one of --session and --always.")
        raise typer.Exit(1)
    return Answer.ALWAYS if always else Answer.SESSION if session else Answer.ONCE


@approvals_app.command("approve")
def approvals_approve(
    call_id: str = typer.Argument(..., help="The call's approval ID, as `approvals list` shows it."),
    session: bool = typer.Option(
        False, "--session", help="Also allow this tool for the rest of the client's session."
    ),
    always: bool = typer.Option(False, "--always", help="Always allow this tool (a rule you can revoke)."),
    config: Path | None = ConfigOption,
    demo: bool = DemoOption,
    as_json: bool = JsonOption,
) -> None:
    """Let a waiting call run."""
    answer = _answer(session, always)
    result = run_service(
        load(config, demo),
        lambda s: s.approve(call_id, answer, by=BY_CLI, channel=CLI_CHANNEL),
        kind="approvals",
    )
    if as_json:
        print_json(result)
        return
    out.print(_approved(result, answer), markup=False, highlight=False)


def _approved(result: dict[str, Any], answer: Answer) -> str:
    """What a yes did: the call runs now, or (its caller had stopped waiting) what it holds for.
    Plain text, made visible on one line: print it without markup."""
    reach = {Answer.ONCE: "once", Answer.SESSION: "for this session", Answer.ALWAYS: "always"}[answer]
    said = f"Approved {result['id']} ({result['tool']}) {reach}"
    if not result.get("late"):
        return visible_line(f"{said}: the call runs now.")
    left = (datetime.fromisoformat(result["retryUntil"]) - datetime.now(UTC)).total_seconds()
    within = f"{left:.0f} s" if left < 120 else f"{left / 60:.0f} min"
    return visible_line(
        f"{said}, but its caller had stopped waiting ({result.get('stoppedWaiting') or 'not run'}): "
        f"nothing runs now. The same call retried by {_who(result)} within {within} runs without "
        "asking again."
    )


@approvals_app.command("deny")
def approvals_deny(
    call_id: str = typer.Argument(..., help="The call's approval ID, as `approvals list` shows it."),
    reason: str | None = typer.Option(None, "--reason", help="Why, for the record and the client."),
    config: Path | None = ConfigOption,
    demo: bool = DemoOption,
    as_json: bool = JsonOption,
) -> None:
    """Refuse a waiting call: it is not run, and its client is told a person declined."""
    result = run_service(
        load(config, demo),
        lambda s: s.deny(call_id, by=BY_CLI, channel=CLI_CHANNEL, reason=reason),
        kind="approvals",
    )
    if as_json:
        print_json(result)
        return
    out.print(styled(f"Denied {result['id']} ({result['tool']}): the call was not run."))


WATCH_CHOICES = {"o": Answer.ONCE, "s": Answer.SESSION, "a": Answer.ALWAYS}


@approvals_app.command("watch")
def approvals_watch(
    interval: float = typer.Option(1.0, "--interval", help="Seconds between looks for new calls."),
    config: Path | None = ConfigOption,
    demo: bool = DemoOption,
) -> None:
    """Show calls as they arrive and answer them here: [o]nce, [s]ession, [a]lways, [d]eny or
    [k] to skip. Ctrl-C stops watching."""
    loaded = load(config, demo)
    seen: set[str] = set()
    out.print("Watching for calls that need approval (Ctrl-C to stop)…")
    try:
        while True:
            # Every waiting call, oldest first: one listing's limit would hide the older ones.
            for call in reversed(run_service(loaded, lambda s: s.pending(limit=None), kind="approvals")):
                if call["id"] in seen:
                    continue
                seen.add(call["id"])
                _ask_in_terminal(loaded, call)
            time.sleep(interval)
    except (KeyboardInterrupt, EOFError):
        out.print("\nStopped watching.")


def _ask_in_terminal(loaded: Any, call: dict[str, Any]) -> None:
    """The question, as `form` in pipeline/approval.py words it for a client: toolkeeper's own
    facts first, then what the server says of itself, then the long values."""
    out.print(styled("\n", (call["id"], "bold"), f" {call['tool']} from {_who(call)}"))
    out.print(styled(f"  {call['sentence']}"))
    for warning in call["warnings"]:
        out.print(styled("  ", (f"⚠ {warning}", "yellow")))
    for fact in call.get("reliedOn", ()):
        out.print(styled(f"  toolkeeper relies on this: {fact}"))
    out.print(styled(f"  why: {call['reason']}"))
    if call.get("text"):
        out.print(styled(f"  your note: {call['text']}"))
    if call.get("serverTitle"):
        out.print(styled(("  the server calls it: ", "dim"), call["serverTitle"]))
    if call.get("claims"):
        out.print(styled(("  the server claims: ", "dim"), ", ".join(call["claims"])))
    for line in call.get("argumentsInFull", ()):
        out.print(styled(f"  in full: {line}"))
    offered = "/".join(f"[{c[0]}]{c[1:]}" for c in call["choices"]) + "/s[k]ip"
    while True:
        choice = input(f"  {offered}? ").strip().lower()[:1]
        if choice == "k":
            return
        if choice == "d":
            run_service(
                loaded, lambda s: s.deny(call["id"], by=BY_CLI, channel=CLI_CHANNEL), kind="approvals"
            )
            out.print("  denied: the call was not run.")
            return
        picked = WATCH_CHOICES.get(choice)
        if picked is not None and picked.value in call["choices"]:
            said = _approved(_approve(loaded, call["id"], picked), picked)
            out.print(f"  {said}", markup=False, highlight=False)
            return


def _approve(loaded: Any, call_id: str, answer: Answer) -> dict[str, Any]:
    result: dict[str, Any] = run_service(
        loaded, lambda s: s.approve(call_id, answer, by=BY_CLI, channel=CLI_CHANNEL), kind="approvals"
    )
    return result


@approvals_app.command("rules")
def approvals_rules(
    config: Path | None = ConfigOption,
    demo: bool = DemoOption,
    as_json: bool = JsonOption,
) -> None:
    """Approval rules, in the order they are tried: yours, and those your "session" and "always"
    answers made."""
    rules = run_service(load(config, demo), lambda s: s.rules(), kind="policy")
    if as_json:
        print_json(rules)
        return
    if not rules:
        out.print("No approval rules: every call follows the confirm modes and the hints.")
        return
    table = new_table("id", "rule", "scope", "made by", title="Approval rules (strictest match wins)")
    for rule in rules:
        table.add_row(str(rule["id"]), rule["text"], rule["scope"], rule["origin"])
    out.print(table)


@approvals_app.command("revoke")
def approvals_revoke(
    rule_id: int = typer.Argument(..., help="The rule's id, as `approvals rules` shows it."),
    config: Path | None = ConfigOption,
    demo: bool = DemoOption,
) -> None:
    """Remove an approval rule: its calls are asked again."""
    run_service(load(config, demo), lambda s: s.revoke_rule(rule_id), kind="policy")
    out.print(f"Revoked approval rule {rule_id}.")


@approvals_app.command("add-rule")
def approvals_add_rule(
    rule: str = typer.Argument(
        ...,
        help='The rule as JSON, e.g. \'{"match": {"server": "time"}, "decision": "allow"}\'.',
    ),
    config: Path | None = ConfigOption,
    demo: bool = DemoOption,
) -> None:
    """Add an approval rule of your own (after the existing ones)."""
    parsed = json_argument(rule, "the rule")
    rule_id = run_service(
        load(config, demo), lambda s: s.add_rule(json.dumps(parsed), scope="", origin=BY_CLI), kind="policy"
    )
    out.print(f"Added approval rule {rule_id}.")

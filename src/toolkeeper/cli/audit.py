"""`toolkeeper audit`: the audit log, newest first (a thin face over services/audit.py). It reads
the store only, so it works while the gateway runs and with every server offline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from toolkeeper.cli.common import (
    ConfigOption,
    DemoOption,
    JsonOption,
    app,
    load,
    local_time,
    new_table,
    out,
    run_service,
)

OUTCOME_STYLES = {"ok": "green", "not_run": "red", "cancelled": "dim"}
DECISION_STYLES = {"allow": "green", "deny": "red"}
WIDE = 110  # columns from which the table has room for each outcome's detail


@app.command("audit")
def audit_command(
    tool: str | None = typer.Option(
        None, "--tool", help="Only this tool: the name a client called, server.tool, or the tool's own name."
    ),
    server: str | None = typer.Option(None, "--server", help="Only calls of this server's tools."),
    decision: str | None = typer.Option(
        None, "--decision", help="Only calls with this decision: allow or deny."
    ),
    since: str | None = typer.Option(
        None,
        "--since",
        help="Only calls since then: a duration back from now (15m, 2h, 7d) or an ISO date or time "
        "(local time unless it names a zone).",
    ),
    principal: str | None = typer.Option(
        None,
        "--principal",
        help="Only calls by this principal, exactly as recorded: a client key's name, oauth:SUBJECT, "
        "local or anonymous.",
    ),
    limit: int = typer.Option(50, "--limit", "-n", help="At most this many records (the newest)."),
    config: Path | None = ConfigOption,
    demo: bool = DemoOption,
    as_json: bool = JsonOption,
) -> None:
    """Recorded tool calls, newest first: who called what, what was decided, how it ended.

    With --json, one JSON object per line."""
    records = run_service(
        load(config, demo),
        lambda s: s.query(tool, server, decision, since, limit, principal=principal),
        kind="audit",
    )
    if as_json:
        for record in records:
            print(json.dumps(record, ensure_ascii=False))
        return
    if not records:
        out.print(
            "No recorded calls match."
            if (tool or server or decision or since or principal)
            else "No calls recorded yet."
        )
        return
    _print_table(records)


def principal_label(name: str | None, client_id: str | None) -> str:
    """Who the gateway let in, as people read it: `alice`, or `oauth:sub via client-id`; empty
    for a call recorded before principals were."""
    if name is None:
        return ""
    return f"{name} via {client_id}" if client_id else name


def _who(record: dict[str, Any]) -> str:
    from rich.markup import escape

    client = escape(record["client"]["name"] or "unnamed client")
    principal = principal_label(record["principal"], record["principalClient"])
    return f"{escape(principal)}\n[dim]{client}[/dim]" if principal else client


def _print_table(records: list[dict[str, Any]]) -> None:
    from rich.markup import escape  # Rich on first use (see common.new_table)

    table = new_table(title="Audit log, newest first")
    table.add_column("time", no_wrap=True)
    # Who the gateway let in, then the client they used (as it names itself).
    table.add_column("who")
    table.add_column("tool", no_wrap=True)
    table.add_column("decision", no_wrap=True)
    table.add_column("decided by")
    # One line per outcome: on a wide terminal the detail's start says why; --json has all of it.
    table.add_column("outcome", no_wrap=True, overflow="ellipsis", max_width=30)
    detailed = out.width >= WIDE
    table.add_column("latency", justify="right", no_wrap=True)
    for record in records:
        outcome = record["outcome"]
        outcome_style = OUTCOME_STYLES.get(outcome, "yellow")
        decision_style = DECISION_STYLES.get(record["decision"], "yellow")
        shown_outcome = f"[{outcome_style}]{escape(outcome)}[/{outcome_style}]"
        if detailed and record["detail"]:
            shown_outcome += f" [dim]{escape(record['detail'].splitlines()[0])}[/dim]"
        latency = record["latencyMs"]
        table.add_row(
            local_time(record["at"], seconds=True),
            _who(record),
            escape(record["exposedName"]),
            f"[{decision_style}]{escape(record['decision'])}[/{decision_style}]",
            escape(record["decidedBy"] or ""),
            shown_outcome,
            f"{latency} ms" if latency is not None else "",
        )
    out.print(table)

"""`toolkeeper audit`: the audit log, newest first (a thin face over services/audit.py). It reads
the store only, so it works while the gateway runs and with every server offline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

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
    styled,
)
from toolkeeper.display import visible_line

if TYPE_CHECKING:
    from rich.text import Text

OUTCOME_STYLES = {"ok": "green", "not_run": "red", "cancelled": "dim"}
DECISION_STYLES = {"allow": "green", "deny": "red"}
WIDE = 110  # columns from which the table has room for each outcome's detail
DETAIL_MAX = 200  # of a detail's first line, the most the table needs (its column is narrower)


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


def _who(record: dict[str, Any]) -> Text:
    client = record["client"]["name"] or "unnamed client"
    principal = principal_label(record["principal"], record["principalClient"])
    return styled(principal, "\n", (client, "dim")) if principal else styled(client)


def _print_table(records: list[dict[str, Any]]) -> None:
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
        shown_outcome = styled((outcome, OUTCOME_STYLES.get(outcome, "yellow")))
        if detailed and record["detail"]:
            # The first line only: visible_line keeps a carriage return or the rest on it.
            first = visible_line(record["detail"].splitlines()[0], DETAIL_MAX)
            shown_outcome.append_text(styled((f" {first}", "dim")))
        latency = record["latencyMs"]
        table.add_row(
            local_time(record["at"], seconds=True),
            _who(record),
            record["exposedName"],
            styled((record["decision"], DECISION_STYLES.get(record["decision"], "yellow"))),
            record["decidedBy"] or "",
            shown_outcome,
            f"{latency} ms" if latency is not None else "",
        )
    out.print(table)

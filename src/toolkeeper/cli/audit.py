"""`toolkeeper audit`: the audit log, newest first, and `audit verify` / `audit export` (a thin
face over services/audit.py). They read the store (`audit` and `audit export` first add the
records a gateway that ended left in its journal), so they work while the gateway runs and with
every server offline."""

from __future__ import annotations

import getpass
import json
import os
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import typer

from toolkeeper.cli.common import (
    ConfigOption,
    DemoOption,
    JsonOption,
    app,
    err,
    load,
    local_time,
    new_table,
    out,
    refuse,
    styled,
)
from toolkeeper.cli.operations import run_service
from toolkeeper.display import visible_line
from toolkeeper.errors import ServiceError

if TYPE_CHECKING:
    from rich.text import Text

    from toolkeeper.services.audit import AuditService, Verdict, Verification

OUTCOME_STYLES = {
    "ok": "green",
    "not_run": "red",
    "rate_limited": "yellow",
    "cancelled": "dim",
    "started": "bold yellow",
}
DECISION_STYLES = {"allow": "green", "deny": "red"}
MARKER_STYLES = {"gap": "bold red", "anchor": "cyan"}
WIDE = 110  # columns from which the table has room for each outcome's detail
DETAIL_MAX = 200  # of a detail's first line, the most the table needs (its column is narrower)


def verify_exit_code(verdict: Verdict) -> int:
    """`audit verify`'s exit code (2 is every command's: the configuration, the store or a file
    cannot be read). A function, not a table at the top: the verdicts are the audit service's,
    which only the audit commands load."""
    from toolkeeper.services.audit import Verdict

    codes = {Verdict.WHOLE: 0, Verdict.BROKEN: 1, Verdict.EMPTY: 3, Verdict.NO_KEY: 4, Verdict.WRONG_KEY: 5}
    return codes[verdict]


audit_app = typer.Typer(
    help="Recorded tool calls, newest first: who called what, what was decided, how it ended.",
    no_args_is_help=False,
    invoke_without_command=True,
)
app.add_typer(audit_app, name="audit")


@audit_app.callback(invoke_without_command=True)
def audit_command(
    context: typer.Context,
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
        help="Only records since then: a duration back from now (15m, 2h, 7d) or an ISO date or time "
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

    Gaps (records that had to be dropped) are shown in place whatever the tool, server, decision
    or principal filters, since a gap may hide calls of any of them; anchors (where the chain
    starts, what retention removed) when none of those filters is given. --since narrows both.
    A call shown "started, outcome unknown" was recorded before it ran and never completed (its
    gateway stopped or died meanwhile).

    With --json, one JSON object per line. `audit verify` checks that no record was changed,
    and `audit export` writes the records for another machine."""
    if context.invoked_subcommand is not None:
        return
    records = run_service(
        load(config, demo),
        _recovered_first(lambda s: s.query(tool, server, decision, since, limit, principal=principal)),
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


@audit_app.command("verify")
def verify_command(
    file: Path | None = typer.Option(
        None,
        "--file",
        help="Verify this export (from `audit export`) instead of the store.",
        show_default=False,
    ),
    config: Path | None = ConfigOption,
    demo: bool = DemoOption,
    as_json: bool = JsonOption,
) -> None:
    """Check the audit chain: that no record was changed, removed, inserted or reordered since it
    was written, from the newest retention anchor to the newest record. Uses the key the gateways
    write with (audit.key in the toolkeeper home, or toolkeeper.auditKey).

    Exit codes: 0 the chain is whole (a one-line summary); 1 it is broken (the first record that
    was changed, removed, inserted or reordered is named); 2 the configuration, the store or the
    file cannot be read; 3 the store has no chained records yet; 4 there is no audit key; 5 the
    key is not the one the chain was made with."""
    from toolkeeper.services.audit import AuditService, Verdict
    from toolkeeper.store import Store
    from toolkeeper.store.db import store_url

    loaded = load(config, demo)
    if file is None:
        verification: Verification = run_service(loaded, lambda s: s.verify(), kind="audit")
    else:
        verification = _verify_file(AuditService(Store(store_url(loaded.settings)), loaded.settings), file)
    if as_json:
        print(json.dumps(verification.as_json(), ensure_ascii=False))
    elif verification.verdict is Verdict.WHOLE:
        out.print(styled(verification.message), soft_wrap=True)
    else:
        err.print(styled(f"error: {verification.message}"), soft_wrap=True)
    raise typer.Exit(verify_exit_code(verification.verdict))


def _verify_file(service: AuditService, file: Path) -> Verification:
    try:
        with file.open(encoding="utf-8") as lines:
            return anyio.run(lambda: service.verify(lines, source=str(file)))
    except OSError as exc:
        err.print(styled(f"error: cannot read {file}: {exc.strerror or exc}."), soft_wrap=True)
    except UnicodeDecodeError:
        err.print(styled(f"error: {file} is not UTF-8 text, so it is not an audit export."), soft_wrap=True)
    except ServiceError as exc:
        err.print(styled(f"error: {exc}"), soft_wrap=True)
    raise typer.Exit(2)


@audit_app.command("repair")
def repair_command(
    reason: str = typer.Option(
        ...,
        "--reason",
        help="Why you start a new segment (what you found, what you decided): kept in the chain.",
    ),
    new_key: bool = typer.Option(
        False, "--new-key", help="The audit key is lost: make a new one and key the new segment with it."
    ),
    config: Path | None = ConfigOption,
    demo: bool = DemoOption,
    as_json: bool = JsonOption,
) -> None:
    """Start a new segment of the audit chain, after you decided what to do about a chain that
    cannot be written on (`audit verify` shows why: a record or the head changed, the key lost).
    The earlier segment stays as it is; `audit verify` then shows both and the break between them,
    with your reason, and still reports a change made inside either. Gateways take records again
    (within seconds) and run calls that are not reliably read-only again.

    Exit codes as `audit verify`'s, for the chain after the repair."""
    from toolkeeper.services.audit import Verdict

    by = f"{getpass.getuser()} via CLI"
    verification: Verification = run_service(
        load(config, demo), lambda s: s.repair(reason, by=by, new_key=new_key), kind="audit"
    )
    if as_json:
        print(json.dumps(verification.as_json(), ensure_ascii=False))
    elif verification.verdict is Verdict.WHOLE:
        out.print(styled("A new audit chain segment starts now. " + verification.message), soft_wrap=True)
    else:
        err.print(styled(f"error: {verification.message}"), soft_wrap=True)
    raise typer.Exit(verify_exit_code(verification.verdict))


@audit_app.command("export")
def export_command(
    since: str | None = typer.Option(
        None,
        "--since",
        help="From the first record since then (a duration back from now, or an ISO date or time); "
        "such a segment verifies on its own.",
    ),
    output_format: str = typer.Option(
        "jsonl", "--format", help="The format: jsonl (one JSON object a line)."
    ),
    output: Path | None = typer.Option(
        None, "--output", "-o", help="Write to this file (readable by its owner only) instead of stdout."
    ),
    config: Path | None = ConfigOption,
    demo: bool = DemoOption,
) -> None:
    """Write the audit records with their places and MACs, so another machine with the key (or a
    SIEM) can verify them: `toolkeeper audit verify --file EXPORT`. The first line is a header
    (where the export starts, the chain's head, the key's fingerprint, how the MACs are made);
    then one record a line, in the order each became final."""
    if output_format != "jsonl":
        err.print(styled(f"error: --format {output_format!r} is not known; use jsonl."), soft_wrap=True)
        raise typer.Exit(2)
    loaded = load(config, demo)
    with _opened(output) as write:
        count = run_service(loaded, _recovered_first(lambda s: s.export(write, since)), kind="audit")
    if output is not None:
        err.print(styled(f"Exported {count} records to {output}."), soft_wrap=True)


AuditRead = Callable[["AuditService"], Awaitable[Any]]


def _recovered_first(read: AuditRead) -> AuditRead:
    """`read`, after the records a gateway that ended left in its journal are in the store (said
    on stderr): a gateway killed a moment after a call began still shows that call."""

    async def recovered_then_read(service: AuditService) -> Any:
        told = await service.recover_journals()
        if told is not None:
            err.print(styled(f"audit log: {told}"), soft_wrap=True)
        return await read(service)

    return recovered_then_read


class _opened:
    """Where the export goes: a new file readable by its owner only, or stdout."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.handle: Any = None

    def __enter__(self) -> Any:
        if self.path is None:
            return sys.stdout.write
        try:
            descriptor = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        except OSError as exc:
            refuse(ServiceError(f"Cannot write {self.path}: {exc.strerror}. Choose another --output."))
        self.handle = os.fdopen(descriptor, "w", encoding="utf-8")
        return self.handle.write

    def __exit__(self, *exc: object) -> None:
        if self.handle is not None:
            self.handle.close()


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


def _tool(record: dict[str, Any]) -> Text:
    """The tool called, and below it the remote account the call was made with."""
    from toolkeeper.services.audit import remote_account_label

    account = remote_account_label(record)
    return styled(record["exposedName"], "\n", (account, "dim")) if account else styled(record["exposedName"])


def _print_table(records: list[dict[str, Any]]) -> None:
    from toolkeeper.services.audit import several_replicas

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
    # Which gateway process wrote each record, where more than one wrote those shown.
    with_replica = several_replicas(records)
    if with_replica:
        table.add_column("replica", no_wrap=True)
    for record, row in zip(records, _rows(records, detailed=detailed), strict=True):
        table.add_row(*row, *((styled(record["replica"] or ""),) if with_replica else ()))
    out.print(table)


def _rows(records: list[dict[str, Any]], *, detailed: bool) -> Iterator[tuple[Any, ...]]:
    from toolkeeper.services.audit import marker_sentence, outcome_label

    for record in records:
        time = local_time(record["at"], seconds=True)
        sentence = marker_sentence(record, lambda iso: local_time(iso, seconds=True))
        if sentence is not None:
            style = MARKER_STYLES.get(record["kind"], "yellow")
            yield time, styled((sentence, style)), styled((record["kind"], style)), "", "", "", ""
            continue
        outcome = record["outcome"]
        shown_outcome = styled((outcome_label(record), OUTCOME_STYLES.get(outcome, "yellow")))
        if detailed and record["detail"]:
            # The first line only: visible_line keeps a carriage return or the rest on it.
            first = visible_line(record["detail"].splitlines()[0], DETAIL_MAX)
            shown_outcome.append_text(styled((f" {first}", "dim")))
        latency = record["latencyMs"]
        yield (
            time,
            _who(record),
            _tool(record),
            styled((record["decision"], DECISION_STYLES.get(record["decision"], "yellow"))),
            styled(record["decidedBy"] or ""),
            shown_outcome,
            f"{latency} ms" if latency is not None else "",
        )

"""`toolkeeper doctor`: a thin face over services/doctor.py. Exits 1 when a check found a problem,
0 otherwise (warnings included)."""

from __future__ import annotations

import shlex
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import typer

from toolkeeper.cli.common import (
    ConfigOption,
    DemoOption,
    JsonOption,
    app,
    out,
    print_json,
    start_demo_api_if_used,
    styled,
)

if TYPE_CHECKING:
    from toolkeeper.services.doctor import Finding


@app.command()
def doctor(
    config: Path | None = ConfigOption,
    demo: bool = DemoOption,
    as_json: bool = JsonOption,
    wait: float = typer.Option(10.0, "--wait", help="Seconds to wait for servers to start and answer."),
) -> None:
    """Check what a new setup gets wrong (the configuration, its ${VAR}s, each server's command
    and start, the clients, the store, the HTTP port) with the fix for each, and how many of each
    server's tools the approval policy would ask about."""
    from toolkeeper.cli.live import running_gateway
    from toolkeeper.services.doctor import Examination, examine, has_problem

    start_demo_api_if_used(config, demo)
    if demo:
        options = "--demo"
    elif config is not None:
        options = f"--config {shlex.quote(str(config))}"
    else:
        options = ""
    how = Examination(
        explicit=config,
        demo=demo,
        connect=partial(running_gateway, wait=wait, tells_sign_ins=True),
        command_options=options,
    )
    findings = anyio.run(examine, how)
    if as_json:
        print_json({"problems": has_problem(findings), "findings": [f.as_json() for f in findings]})
    else:
        for finding in findings:
            _print(finding)
    if has_problem(findings):
        raise typer.Exit(1)


def _print(finding: Finding) -> None:
    from toolkeeper.services.doctor import Level

    level_style = {
        Level.OK: ("ok", "green"),
        Level.WARNING: ("warning", "yellow"),
        Level.PROBLEM: ("problem", "bold red"),
        Level.SKIPPED: ("skipped", "dim"),
    }
    word, style = level_style[finding.level]
    out.print(
        styled(
            (f"{word:<8}", style), (f"{finding.check:<10}", "bold"), f"{finding.subject}: {finding.message}"
        ),
        soft_wrap=True,
    )
    for line in finding.details:
        out.print(styled((f"{'':<16}│ ", "dim"), line), soft_wrap=True)
    if finding.next:
        lead = "see" if finding.level in (Level.OK, Level.SKIPPED) else "fix"
        out.print(styled((f"{'':<18}{lead}: ", "dim"), finding.next), soft_wrap=True)

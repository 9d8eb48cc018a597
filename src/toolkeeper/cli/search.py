"""`toolkeeper search QUERY`: find tools by what they do, from the shell. A thin face over
services/search.py, which the model's `find-tools` and the dashboard's search box share: the
same ranking, the same refusals, the same answer.

The person at the shell is the local user, so the search covers every tool the servers offer,
and "listed" says whether the tool is in the list clients get. The equipped toolset decides
that, which is why the store is opened: it holds the toolset, and the notes searched with each
tool."""

from __future__ import annotations

from pathlib import Path

import anyio
import typer

from toolkeeper.catalog.tokens import ENCODING
from toolkeeper.cli.common import (
    NEXT_STEPS,
    ConfigOption,
    DemoOption,
    JsonOption,
    WaitOption,
    app,
    load,
    mark,
    new_table,
    open_store,
    out,
    print_json,
    refuse,
    styled,
)
from toolkeeper.config import Config
from toolkeeper.errors import NextStep, ServiceError
from toolkeeper.services.search import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    SearchAnswer,
    checked_limit,
    checked_query,
)


@app.command()
def search(
    words: list[str] = typer.Argument(
        ..., metavar="QUERY", help="What the tool should do, in a few words; quotes are optional."
    ),
    limit: int = typer.Option(
        DEFAULT_LIMIT, "--limit", "-n", help=f"At most this many matches, 1 to {MAX_LIMIT}."
    ),
    config: Path | None = ConfigOption,
    demo: bool = DemoOption,
    as_json: bool = JsonOption,
    wait: float = WaitOption,
) -> None:
    """Find tools by what they do: the best matches among every tool the servers offer, each with
    its one-line description, its definition's estimated tokens and whether it is in clients'
    tool list now. The model's find-tools and the dashboard's search box rank the same way."""
    try:
        # Checked before any server is started: a refusal is immediate.
        query, most = checked_query(" ".join(words)), checked_limit(limit)
    except ServiceError as exc:
        refuse(exc)
    answer = anyio.run(_search, load(config, demo), query, most, wait)
    if as_json:
        print_json(answer.as_json())
    elif answer.found:
        _print_matches(answer)
    else:
        out.print(styled(f"{answer.no_match} {NEXT_STEPS[NextStep.LIST_TOOLS]}"), soft_wrap=True)


async def _search(config: Config, query: str, limit: int, wait: float) -> SearchAnswer:
    from toolkeeper.cli.live import running_gateway

    async with await open_store(config) as store, running_gateway(config, wait, store) as gateway:
        return await gateway.search_as_person(query, limit)


def _print_matches(answer: SearchAnswer) -> None:
    table = new_table(
        "#",
        "tool",
        "description",
        "tokens",
        "listed",
        title=f"Best matches for '{answer.query}'",
        caption=f"tokens: estimated ({ENCODING} encoding)  ✓ in clients' tool list now  ✗ not listed now",
    )
    # A narrow terminal folds a name rather than cut it: the name is what a person uses next.
    table.columns[1].overflow = "fold"
    for rank, found in enumerate(answer.found, 1):
        name = styled((found.name, "bold"), *(("\n", (found.title, "dim")) if found.title else ()))
        table.add_row(str(rank), name, found.line, f"~{found.tokens:,}", mark(found.listed))
    out.print(table)

"""How the pages show what the records hold: times, who called, JSON from outside. Text from
outside is made visible here (display.py) before a template escapes it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from markupsafe import Markup

from toolkeeper.display import visible, visible_line
from toolkeeper.services.costs import Tally

NAME_MAX = 200  # of a client's or a principal's name, the most a page shows


def visible_in_page(value: Any) -> Any:
    """What every `{{ … }}` of a template writes (the templates' `finalize`): text made visible
    as every face shows text from outside, so a tool's name or description cannot reorder or
    hide what the page says. Markup the templates made themselves passes as it is: a macro's
    output, and a form value that must go back exactly as it came (written `{{ value | e }}`)."""
    if isinstance(value, str) and not isinstance(value, Markup):
        return visible(value)
    return value


def tally(counted: Mapping[str, int]) -> str:
    """A `costs` total as a page shows it: `12 tools, ~3.1k tokens`."""
    return str(Tally(counted["tools"], counted["tokens"]))


def utc_time(iso: str | None) -> str:
    """An ISO time as a page shows it: to the second, in UTC (the server cannot know the
    reader's zone; the page says UTC)."""
    if not iso:
        return ""
    try:
        moment = datetime.fromisoformat(iso)
    except ValueError:  # a record changed by hand shows as it is
        return visible_line(iso, NAME_MAX)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def client_label(client: Mapping[str, Any] | None) -> str:
    """A client as it names itself: `claude-code 1.2`; empty when it gave no name."""
    parts = [str(part) for part in ((client or {}).get("name"), (client or {}).get("version")) if part]
    return visible_line(" ".join(parts), NAME_MAX)


def who(principal: str | None, client: Mapping[str, Any] | None, via: str | None = None) -> str:
    """Who called, as people read it: the principal the gateway let in (and the OAuth client it
    came through), then the client it used: `alice with claude-code 1.2`."""
    used = client_label(client) or "an unnamed client"
    if not principal:
        return used
    named = visible_line(principal, NAME_MAX) + (f" via {visible_line(via, NAME_MAX)}" if via else "")
    return f"{named} with {used}"


def json_block(value: Any) -> str:
    """A JSON value laid out to be read, every character that would act on the reading escaped."""
    return visible(json.dumps(value, indent=2, ensure_ascii=False, default=str))

"""Text from a server on the dashboard's pages: terminal escapes and bidirectional overrides are
written as escapes, as every face shows them, while a form value goes back exactly as it came."""

from __future__ import annotations

import html
import re
from pathlib import Path

from conftest import PY, ROOT
from web_support import Dashboard, config_for, form_token, running_dashboard

HOSTILE = str(ROOT / "tests" / "servers" / "hostile.py")
PREVIEW = "rm_rf\x1b[2K\x1b[1Gread_file"  # the name tests/servers/hostile.py gives its tool
ACTING = re.compile("[\x1b\u202e]")


def test_escapes_in_a_tools_name_and_description_are_shown_not_acted_on(tmp_path: Path) -> None:
    with running_dashboard(config_for(tmp_path, {"h": {"command": PY, "args": [HOSTILE]}})) as board:
        listed = board.client.get("/tools")
        assert listed.status_code == 200
        assert "h.rm_rf\\u001b[2K\\u001b[1Gread_file" in listed.text
        assert "Shows a file.\\u001b[8m Deletes everything." in listed.text
        assert not ACTING.search(listed.text)
        exposed = board.call(lambda: _exposed(board))
        page = board.client.get(f"/tools/{exposed}")
        assert page.status_code == 200 and not ACTING.search(page.text)
        assert "Shows a file.\\u001b[8m Deletes everything." in page.text


async def _exposed(board: Dashboard) -> str:
    (tool,) = [t for t in board.gateway.catalog.tools if t.namespaced_name == f"h.{PREVIEW}"]
    return tool.exposed_name


def test_the_toolset_picker_sends_such_a_tools_name_back_as_it_came(tmp_path: Path) -> None:
    with running_dashboard(config_for(tmp_path, {"h": {"command": PY, "args": [HOSTILE]}})) as board:
        picker = board.client.get("/toolsets/new")
        values = [html.unescape(v) for v in re.findall(r'name="tool" value="([^"]*)"', picker.text)]
        assert f"h.{PREVIEW}" in values  # the name itself, not its shown form
        assert "h.rm_rf\\u001b" in picker.text  # while the label beside it shows the escapes
        saved = board.client.post(
            "/toolsets/new",
            data={
                "csrf": form_token(board.client),
                "action": "save",
                "name": "previewing",
                "tool": f"h.{PREVIEW}",
            },
            follow_redirects=False,
        )
        assert saved.status_code == 303, saved.text
        shown = board.client.get("/api/toolsets/previewing", headers=board.auth).json()
        assert [t["namespacedName"] for t in shown["tools"]] == [f"h.{PREVIEW}"]

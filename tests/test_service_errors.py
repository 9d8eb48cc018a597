"""Every refusal has a kind, and each face turns the kind into its own form: an exit code for the
CLI, an `isError` result for the MCP configuration tools, a status for a web face. Messages name
the thing; only a face spells the next step in its own terms (a flag, a tool name)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import controllable, write_config
from tests.test_cli_toolsets import tk
from tests.test_store import catalog
from tests.test_toolsets_mcp import menu_client, ok, refused, saved_names, two_servers
from toolkeeper.annotations.effective import Annotator
from toolkeeper.annotations.rules import RuleError, parse_rule
from toolkeeper.cli.common import EXIT_CODES
from toolkeeper.cli.common import NEXT_STEPS as CLI_NEXT_STEPS
from toolkeeper.errors import ErrorKind, NextStep, ServiceError, http_status
from toolkeeper.faces.mcp.config_tools import NEXT_STEPS as MCP_NEXT_STEPS
from toolkeeper.faces.mcp.config_tools import refusal
from toolkeeper.services import Services
from toolkeeper.store import Store, StoreError
from toolkeeper.toolsets.model import ToolRef, ToolsetError, check_toolset_name, resolve

pytestmark = pytest.mark.anyio

# What no service message may contain: a CLI flag or an MCP configuration tool's name.
FACE_WORDS = re.compile(
    r"--[a-z]|toolkeeper |(list-available-tools|build-toolset|equip-toolset|delete-toolset|import-toolset)"
)


# -- the three mappings -------------------------------------------------------------------


def test_http_status_of_every_kind() -> None:
    assert {kind: http_status(kind) for kind in ErrorKind} == {
        ErrorKind.NOT_FOUND: 404,
        ErrorKind.INVALID: 422,
        ErrorKind.CONFLICT: 409,
        ErrorKind.UNAVAILABLE: 503,
        ErrorKind.STORE: 503,
    }


def test_cli_exit_code_of_every_kind() -> None:
    assert EXIT_CODES == {
        ErrorKind.NOT_FOUND: 1,
        ErrorKind.INVALID: 1,
        ErrorKind.CONFLICT: 1,
        ErrorKind.UNAVAILABLE: 2,
        ErrorKind.STORE: 2,
    }


def test_every_kind_is_an_mcp_tool_error_with_the_faces_next_step() -> None:
    for kind in ErrorKind:
        result = refusal(ServiceError(f"refused: {kind}", kind))
        assert result == {"content": [{"type": "text", "text": f"refused: {kind}"}], "isError": True}
    taken = refusal(ServiceError('Toolset "x" already exists.', ErrorKind.CONFLICT, NextStep.OVERWRITE))
    assert taken["isError"] is True
    assert taken["content"][0]["text"] == 'Toolset "x" already exists. Set overwrite: true to replace it.'


def test_every_next_step_is_spelled_by_both_faces() -> None:
    assert set(MCP_NEXT_STEPS) == set(NextStep) == set(CLI_NEXT_STEPS)


def test_kinds_default_per_error_class() -> None:
    assert ServiceError("x").kind is ErrorKind.INVALID
    assert ServiceError("x", ErrorKind.CONFLICT).kind is ErrorKind.CONFLICT
    assert StoreError("read-only").kind is ErrorKind.STORE and isinstance(StoreError("x"), ServiceError)
    with pytest.raises(ToolsetError) as bad_name:
        check_toolset_name("Bad Name")
    assert bad_name.value.kind is ErrorKind.INVALID
    with pytest.raises(RuleError) as bad_rule:
        parse_rule({"when": {}})
    assert bad_rule.value.kind is ErrorKind.INVALID
    with pytest.raises(ToolsetError) as unknown:
        resolve(ToolRef("ctl.nope"), catalog())
    assert unknown.value.kind is ErrorKind.NOT_FOUND and unknown.value.next_step is NextStep.LIST_TOOLS
    assert "Tool not found: ctl.nope" in str(unknown.value) and not FACE_WORDS.search(str(unknown.value))


# -- the kinds the services give ----------------------------------------------------------


async def services(tmp_path: Path, live: bool = True) -> tuple[Store, Services]:
    store = await Store(f"sqlite:///{tmp_path / 'store.db'}").open()
    tools = catalog()
    annotator = Annotator()
    return store, Services(
        store, annotator=lambda: annotator, catalog=(lambda: tools) if live else (lambda: None)
    )


async def refusal_of(operation: Any) -> ServiceError:
    with pytest.raises(ServiceError) as caught:
        await operation
    assert not FACE_WORDS.search(str(caught.value)), str(caught.value)
    return caught.value


async def test_toolset_refusals_have_their_kind_and_write_nothing(tmp_path: Path) -> None:
    store, live = await services(tmp_path)
    try:
        toolsets = live.toolsets
        await toolsets.build("kept", ["ctl.echo"], by_person=True)
        before = await store.revision()

        unknown = await refusal_of(toolsets.equip("nope"))
        assert unknown.kind is ErrorKind.NOT_FOUND and 'Toolset "nope" not found' in str(unknown)
        assert (
            await refusal_of(toolsets.build("Bad Name", ["ctl.echo"], by_person=True))
        ).kind is ErrorKind.INVALID
        assert (await refusal_of(toolsets.equip("Bad Name"))).kind is ErrorKind.INVALID
        assert (
            await refusal_of(toolsets.build("kept", ["ctl.pid"], by_person=True))
        ).kind is ErrorKind.CONFLICT

        exported = await toolsets.export("kept")
        taken = await refusal_of(toolsets.import_toolset(exported, by_person=True))
        assert taken.kind is ErrorKind.CONFLICT and taken.next_step is NextStep.OVERWRITE
        assert "overwrite" in str(taken)
        assert (
            await refusal_of(toolsets.import_toolset(exported, name="", by_person=True))
        ).kind is ErrorKind.INVALID

        # Deleting needs the confirmation, whichever face asks.
        unconfirmed = await refusal_of(toolsets.delete("kept", by_person=True))
        assert unconfirmed.kind is ErrorKind.INVALID and unconfirmed.next_step is NextStep.CONFIRM
        assert (
            await refusal_of(toolsets.delete("nope", confirm=True, by_person=True))
        ).kind is ErrorKind.NOT_FOUND

        # The equipped toolset unless one is named: none equipped and none named.
        nothing = await refusal_of(toolsets.notes())
        assert nothing.kind is ErrorKind.NOT_FOUND and nothing.next_step is NextStep.EQUIP_TOOLSET
        assert (await toolsets.notes("kept"))["toolset"] == "kept"
        note = [{"name": "n", "note": "t"}]
        assert (await refusal_of(toolsets.add_notes("ctl.echo", note))).kind is ErrorKind.NOT_FOUND
        outside = await refusal_of(toolsets.add_notes("ctl.pid", note, "kept"))
        assert outside.kind is ErrorKind.NOT_FOUND
        gone = await refusal_of(toolsets.remove_notes("ctl.echo", ["n"], "kept"))
        assert gone.kind is ErrorKind.NOT_FOUND

        assert await store.revision() == before  # not one of them wrote
        assert (await toolsets.delete("kept", confirm=True, by_person=True))["deleted"] == "kept"
        none_saved = await refusal_of(toolsets.notes())
        assert none_saved.next_step is NextStep.BUILD_TOOLSET
    finally:
        await store.close()


async def test_offline_services_say_the_servers_are_unavailable(tmp_path: Path) -> None:
    store, offline = await services(tmp_path, live=False)
    try:
        for operation in (
            offline.toolsets.build("kit", ["ctl.echo"], by_person=True),
            offline.toolsets.available_tools(),
            offline.hints.explain("ctl.echo"),
            offline.rules.add(
                "ctl.echo", {"when": {"argument": "a", "present": True}, "hints": {}}, by_person=True
            ),
            offline.rules.test("ctl.echo", {}),
        ):
            error = await refusal_of(operation)
            assert error.kind is ErrorKind.UNAVAILABLE or isinstance(error, RuleError), error
        assert (await refusal_of(offline.toolsets.repin("kit"))).kind is ErrorKind.UNAVAILABLE
        missing_rule = await refusal_of(offline.rules.remove("ctl.echo", 3))
        assert missing_rule.kind is ErrorKind.NOT_FOUND and "no rule 3" in str(missing_rule)
    finally:
        await store.close()


async def test_a_read_only_store_is_kind_store(tmp_path: Path) -> None:
    store, live = await services(tmp_path)
    await live.toolsets.build("kept", ["ctl.echo"], by_person=True)
    await store.close()
    read_only = await Store(f"sqlite:///file:{tmp_path / 'store.db'}?mode=ro&uri=true").open()
    try:
        tools = catalog()
        ro = Services(read_only, annotator=lambda: Annotator(), catalog=lambda: tools)
        error = await refusal_of(ro.toolsets.equip("kept"))
        assert isinstance(error, StoreError) and error.kind is ErrorKind.STORE
    finally:
        await read_only.close()


# -- the CLI face: exit codes and its own next steps --------------------------------------


def test_cli_exit_codes_follow_the_kind(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"ctl": controllable()})
    tk(config, "toolsets", "build", "kept", "ctl.echo")

    unknown = tk(config, "toolsets", "equip", "nope", ok=False)
    assert unknown.returncode == 1 and 'Toolset "nope" not found' in unknown.stderr
    nothing = tk(config, "notes", "list", ok=False)
    assert nothing.returncode == 1 and "No toolset is currently equipped" in nothing.stderr
    assert "--toolset" in nothing.stderr  # the CLI's spelling of "name one"
    exported = tmp_path / "kept.json"
    tk(config, "toolsets", "export", "kept", "-o", str(exported))
    taken = tk(config, "toolsets", "import", str(exported), ok=False)
    assert taken.returncode == 1 and "already exists" in taken.stderr and "--overwrite" in taken.stderr
    assert "Replaced" not in tk(config, "toolsets", "import", str(exported), "--overwrite").stderr
    unconfirmed = tk(config, "toolsets", "delete", "kept", ok=False)
    assert unconfirmed.returncode == 1 and "--yes" in unconfirmed.stderr
    assert json.loads(tk(config, "toolsets", "list", "--json").stdout)["toolsets"][0]["name"] == "kept"

    # No time to connect the servers: unavailable, exit 2.
    early = tk(config, "toolsets", "build", "other", "ctl.echo", "--wait", "0", ok=False)
    assert early.returncode == 2 and "have not connected yet" in early.stderr, early.stderr

    # A store that cannot be written: exit 2, naming it (README: a read-only store exits 2).
    home = tmp_path / "toolkeeper-home" / "toolkeeper.db"
    assert home.exists()
    ro = write_config(
        tmp_path, {"ctl": controllable()}, databaseUrl=f"sqlite:///file:{home}?mode=ro&uri=true"
    )
    read_only = tk(ro, "toolsets", "equip", "kept", ok=False)
    assert read_only.returncode == 2 and "read-only" in read_only.stderr
    assert "Traceback" not in read_only.stderr


# -- the MCP face: the service speaks, the tool adds its own next step --------------------


async def test_configuration_tools_pass_the_rules_to_the_service(tmp_path: Path) -> None:
    config = two_servers(tmp_path)
    async with menu_client(config, "legacy") as (client, _):
        echo = [{"namespacedName": "ctl.echo"}]
        await ok(client, "build-toolset", {"name": "kept", "tools": echo})
        # The toolset name's rule is the service's: its words, for every tool that takes a name.
        for tool in ("equip-toolset", "export-toolset", "delete-toolset"):
            text = await refused(client, tool, {"name": "Bad_Name"})
            assert text.startswith("Invalid toolset name format"), text
        text = await refused(
            client, "set-tool-hints", {"toolRef": echo[0], "hints": {"title": "E"}, "toolset": "X"}
        )
        assert text.startswith("Invalid toolset name format"), text
        # Confirmation is the service's rule; the tool names its own argument.
        text = await refused(client, "delete-toolset", {"name": "kept", "confirm": False})
        assert "confirm the deletion" in text and text.endswith("Set confirm: true to go ahead.")
        exported = await ok(client, "export-toolset", {"name": "kept"})
        text = await refused(client, "import-toolset", {"toolset": exported})
        assert "already exists" in text and text.endswith("Set overwrite: true to replace it.")
        assert "--" not in text
        assert (await ok(client, "import-toolset", {"toolset": exported, "overwrite": True}))["replaced"]
        # A schema rule the service does not check is still the schema's.
        text = await refused(client, "build-toolset", {"name": "other", "tools": echo, "extra": 1})
        assert "Invalid arguments for build-toolset" in text
        assert await saved_names(client) == ["kept"]

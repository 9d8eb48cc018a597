"""The three identities of a tool: namespaced name, refId, exposed name (DESIGN.md, "Identity of a tool")."""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import random
import re

import pytest

from toolkeeper.catalog import ServerTools, build_catalog
from toolkeeper.catalog.identity import assign_exposed_names, base_exposed_name, namespaced_name, ref_id

EXPOSED = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def suffix(server: str, tool: str) -> str:
    """The documented short stable suffix: 6 hex digits of SHA-256 over (server, tool)."""
    return "_" + hashlib.sha256(f"{server}\0{tool}".encode()).hexdigest()[:6]


def names_of(triples: list[tuple[str, str, str]]) -> dict[tuple[str, str], str]:
    names = assign_exposed_names(triples)
    assert set(names) == {(s, t) for s, _, t in triples}
    for name in names.values():
        assert EXPOSED.match(name), name
    assert len(set(names.values())) == len(names), names
    return names


# --- namespaced name ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("server", "tool", "expected"),
    [("git", "status", "git.status"), ("my-srv", "read.file", "my-srv.read.file"), ("s", "", "s.")],
)
def test_namespaced_name(server, tool, expected):
    assert namespaced_name(server, tool) == expected


# --- refId --------------------------------------------------------------------------------------

TOOL = {
    "name": "search",
    "title": "Search",
    "description": "Search the notes.",
    "inputSchema": {
        "type": "object",
        "properties": {"query": {"type": "string"}, "limit": {"type": "integer", "default": 10}},
        "required": ["query"],
    },
    "outputSchema": {"type": "object", "properties": {"hits": {"type": "array"}}},
    "annotations": {"readOnlyHint": True, "openWorldHint": False},
    "icons": [{"src": "data:image/png;base64,AA=="}],
    "_meta": {"com.example/x": 1},
}


def expected_ref(server: str, tool: dict) -> str:
    identity = {
        "server": server,
        "name": tool.get("name"),
        "inputSchema": tool.get("inputSchema"),
        "outputSchema": tool.get("outputSchema"),
    }
    canonical = json.dumps(identity, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def test_ref_id_is_sha256_of_canonical_json():
    got = ref_id("notes", TOOL)
    assert re.fullmatch(r"[0-9a-f]{64}", got)
    assert got == expected_ref("notes", TOOL)


def test_ref_id_ignores_key_order():
    reordered = {
        k: (dict(reversed(list(v.items()))) if isinstance(v, dict) else v)
        for k, v in reversed(list(TOOL.items()))
    }
    reordered["inputSchema"]["properties"] = dict(reversed(list(TOOL["inputSchema"]["properties"].items())))
    assert list(reordered["inputSchema"]) != list(TOOL["inputSchema"])
    assert ref_id("notes", reordered) == ref_id("notes", TOOL)


def changed(path: tuple[str, ...], value) -> dict:
    tool = copy.deepcopy(TOOL)
    target = tool
    for key in path[:-1]:
        target = target[key]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return tool


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("description",), "Find notes by words."),
        (("description",), KeyError),
        (("title",), "Find"),
        (("annotations",), {"readOnlyHint": False, "destructiveHint": True}),
        (("annotations",), KeyError),
        (("annotations", "openWorldHint"), True),
        (("icons",), []),
        (("_meta",), {"other": 2}),
        (("execution",), {"taskSupport": "optional"}),
    ],
)
def test_ref_id_ignores_descriptions_and_annotations(path, value):
    assert ref_id("notes", changed(path, value)) == ref_id("notes", TOOL)


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("inputSchema", "required"), ["query", "limit"]),
        (("inputSchema", "properties", "limit", "default"), 20),
        (("inputSchema", "properties", "query", "description"), "What to look for"),
        (("inputSchema", "additionalProperties"), False),
        (("inputSchema",), KeyError),
        (("outputSchema",), KeyError),
        (("outputSchema", "properties", "hits", "items"), {"type": "string"}),
        (("name",), "search2"),
    ],
)
def test_ref_id_changes_with_the_schemas_and_the_name(path, value):
    other = changed(path, value)
    assert ref_id("notes", other) != ref_id("notes", TOOL)
    assert ref_id("notes", other) == expected_ref("notes", other)


def test_ref_id_depends_on_the_server():
    assert ref_id("notes", TOOL) != ref_id("notes2", TOOL)


def test_ref_id_missing_and_null_output_schema_are_the_same():
    without = changed(("outputSchema",), KeyError)
    assert ref_id("s", without) == ref_id("s", {**without, "outputSchema": None})


# --- exposed names ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prefix", "tool", "expected"),
    [
        ("git", "status", "git__status"),
        ("", "status", "status"),
        ("my-srv", "read.file", "my-srv__read_file"),
        ("a.b", "x y/z", "a_b__x_y_z"),
        ("p", "héllo", "p__h_llo"),
        ("p", "", "p__"),
        ("", "", ""),
    ],
)
def test_base_exposed_name(prefix, tool, expected):
    assert base_exposed_name(prefix, tool) == expected


def test_plain_names_when_nothing_collides():
    names = names_of(
        [
            ("git", "git", "hub_x"),
            ("git_hub", "git_hub", "x"),
            ("fs", "", "read"),
            ("fs", "", "write"),
            ("web", "w", "fetch.page"),
        ]
    )
    assert names == {
        ("git", "hub_x"): "git__hub_x",
        ("git_hub", "x"): "git_hub__x",
        ("fs", "read"): "read",
        ("fs", "write"): "write",
        ("web", "fetch.page"): "w__fetch_page",
    }


def test_same_prefix_and_tool_on_two_servers(caplog):
    caplog.set_level(logging.WARNING, logger="toolkeeper")
    names = names_of([("a", "p", "x"), ("b", "p", "x"), ("c", "p", "y")])
    assert names == {
        ("a", "x"): "p__x" + suffix("a", "x"),
        ("b", "x"): "p__x" + suffix("b", "x"),
        ("c", "y"): "p__y",
    }
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "'p__x'" in warnings[0] and "a.x" in warnings[0] and "b.x" in warnings[0]


def test_empty_prefix_on_two_servers_with_the_same_tool():
    names = names_of([("one", "", "search"), ("two", "", "search"), ("two", "", "other")])
    assert names == {
        ("one", "search"): "search" + suffix("one", "search"),
        ("two", "search"): "search" + suffix("two", "search"),
        ("two", "other"): "other",
    }


def test_empty_prefix_tool_equal_to_another_servers_prefixed_name():
    names = names_of([("plain", "", "git__status"), ("git", "git", "status")])
    assert names == {
        ("plain", "git__status"): "git__status" + suffix("plain", "git__status"),
        ("git", "status"): "git__status" + suffix("git", "status"),
    }


def test_dot_in_a_tool_name_that_sanitises_into_an_existing_name():
    names = names_of([("s", "s", "read.file"), ("s", "s", "read_file"), ("s", "s", "read-file")])
    assert names == {
        ("s", "read.file"): "s__read_file" + suffix("s", "read.file"),
        ("s", "read_file"): "s__read_file" + suffix("s", "read_file"),
        ("s", "read-file"): "s__read-file",
    }


def test_separator_ambiguity_collides_and_is_resolved():
    # prefix "a_" + tool "b" and prefix "a" + tool "_b" both give "a___b".
    names = names_of([("s1", "a_", "b"), ("s2", "a", "_b")])
    assert names == {("s1", "b"): "a___b" + suffix("s1", "b"), ("s2", "_b"): "a___b" + suffix("s2", "_b")}


def test_over_long_names_are_shortened_with_the_suffix(caplog):
    caplog.set_level(logging.WARNING, logger="toolkeeper")
    tool = "t" * 70
    exactly = "u" * (64 - len("srv__"))
    names = names_of([("srv", "srv", tool), ("srv", "srv", exactly)])
    assert names[("srv", tool)] == ("srv__" + tool)[:57] + suffix("srv", tool)
    assert len(names[("srv", tool)]) == 64
    assert names[("srv", exactly)] == "srv__" + exactly  # 64 is still allowed
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        f"tool srv.{tool}: exposed name shortened to {names[('srv', tool)]!r}"
    ]


def test_many_shortened_names_of_one_server_are_one_warning(caplog):
    # Microsoft Graph's spec shortens about 3,000 names: a line each flooded every command's terminal.
    caplog.set_level(logging.DEBUG, logger="toolkeeper")
    triples = [("wide", "wide", f"{'v' * 70}{i}") for i in range(3)]
    names = names_of(triples)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    first = triples[0][2]
    assert warnings == [
        f"server 'wide': 3 exposed names shortened to 64 characters with a hash, such as wide.{first} "
        f"to {names[('wide', first)]!r}; `toolkeeper tools --all` lists them"
    ]
    assert sum(r.levelno == logging.DEBUG and "shortened" in r.getMessage() for r in caplog.records) == 3


def test_long_names_sharing_their_first_57_characters_stay_distinct():
    triples = [("srv", "srv", "x" * 60 + str(i)) for i in range(20)]
    names = names_of(triples)
    assert {len(n) for n in names.values()} == {64}


def test_empty_name_gets_a_suffix():
    names = names_of([("s", "", "")])
    assert names == {("s", ""): suffix("s", "")}


def test_a_suffixed_name_never_equals_another_tools_plain_name():
    # Two colliding tools get "p__x_<hash>"; a third tool is literally called "x_<hash>".
    taken = "x" + suffix("a", "x")
    triples = [("a", "p", "x"), ("b", "p", "x"), ("c", "p", taken)]
    assert "p__" + taken == "p__x" + suffix("a", "x")
    names = names_of(triples)
    assert names[("a", "x")] == "p__x" + suffix("a", "x")
    assert names[("b", "x")] == "p__x" + suffix("b", "x")
    assert names[("c", taken)] != "p__" + taken
    assert names[("c", taken)].startswith("p__x_")
    assert names_of(list(reversed(triples))) == names


def test_suffix_is_stable_across_runs():
    # Literal value: clients and person-made references must see the same name tomorrow.
    names = names_of([("alpha", "p", "run"), ("beta", "p", "run")])
    assert names[("alpha", "run")] == "p__run" + suffix("alpha", "run")
    assert names[("alpha", "run")] == "p__run_" + hashlib.sha256(b"alpha\0run").hexdigest()[:6]
    assert names == names_of([("alpha", "p", "run"), ("beta", "p", "run")])


# --- random triples: unique, valid, order independent -------------------------------------------

ALPHABET = "abcxyzAZ09_-" + "._ /:$é中\t" + "__"


def random_triples(seed: int, count: int) -> list[tuple[str, str, str]]:
    rng = random.Random(seed)
    servers = [f"s{i}" + rng.choice(["", ".x", "-y", "_z"]) for i in range(12)]
    prefixes = ["", "p", "p_", "s", "a__b", "x" * 40] + [f"s{i}" for i in range(4)]
    server_prefix = {s: rng.choice(prefixes) for s in servers}
    common = ["read", "write", "read_file", "read.file", "read-file", "x", "", "_", "__", "a__b"]
    triples: dict[tuple[str, str], str] = {}
    while len(triples) < count:
        server = rng.choice(servers)
        kind = rng.random()
        if kind < 0.4:
            tool = rng.choice(common)
        elif kind < 0.8:
            tool = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 12)))
        else:
            tool = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(50, 90)))
        triples[(server, tool)] = server_prefix[server]
    return [(s, p, t) for (s, t), p in triples.items()]


@pytest.mark.parametrize("seed", range(8))
def test_random_triples_are_unique_valid_and_order_independent(seed):
    triples = random_triples(seed, 300)
    names = names_of(triples)
    rng = random.Random(1000 + seed)
    for _ in range(5):
        shuffled = triples[:]
        rng.shuffle(shuffled)
        assert names_of(shuffled) == names
    # A name is left plain exactly when its base is valid and shared by no other tool; every other
    # name is the base, cut to fit, plus the (server, tool) suffix.
    count: dict[str, int] = {}
    for _, prefix, tool in triples:
        count[base_exposed_name(prefix, tool)] = count.get(base_exposed_name(prefix, tool), 0) + 1
    kinds = {"plain": 0, "suffixed": 0}
    for server, prefix, tool in triples:
        base = base_exposed_name(prefix, tool)
        if count[base] == 1 and EXPOSED.match(base):
            kinds["plain"] += 1
            assert names[(server, tool)] == base
        else:
            kinds["suffixed"] += 1
            assert names[(server, tool)] == base[: 64 - 7] + suffix(server, tool)
    assert kinds["plain"] > 50 and kinds["suffixed"] > 50, kinds  # the generator exercises both


def test_adding_an_unrelated_server_does_not_rename_existing_tools():
    before = names_of([("a", "a", "x"), ("b", "b", "x"), ("c", "", "y")])
    after = names_of([("a", "a", "x"), ("b", "b", "x"), ("c", "", "y"), ("d", "d", "x")])
    assert {k: after[k] for k in before} == before


# --- the catalog uses all three -----------------------------------------------------------------


def test_catalog_identities_and_lookups():
    echo = {"name": "echo", "description": "d", "inputSchema": {"type": "object"}}
    twin = {"name": "echo", "description": "other", "inputSchema": {"type": "object"}}
    dotted = {"name": "get.time", "inputSchema": {"type": "object"}}
    catalog = build_catalog(
        [
            ServerTools("one", "p", True, [echo, dotted]),
            ServerTools("two", "p", False, [twin]),
        ]
    )
    rows = [(t.server, t.name, t.exposed_name, t.namespaced_name, t.available) for t in catalog.tools]
    assert rows == [
        ("one", "echo", "p__echo" + suffix("one", "echo"), "one.echo", True),
        ("one", "get.time", "p__get_time", "one.get.time", True),
        ("two", "echo", "p__echo" + suffix("two", "echo"), "two.echo", False),
    ]
    assert [t.ref_id for t in catalog.tools] == [
        expected_ref("one", echo),
        expected_ref("one", dotted),
        expected_ref("two", twin),
    ]
    assert set(catalog.by_exposed) == {r[2] for r in rows}
    assert set(catalog.by_namespaced) == {"one.echo", "one.get.time", "two.echo"}
    listed = catalog.by_namespaced["one.get.time"].listed()
    assert listed == {**dotted, "name": "p__get_time"}
    assert dotted["name"] == "get.time"  # the declared tool is not mutated


def test_catalog_exposed_names_do_not_depend_on_server_order():
    servers = [
        ServerTools("git", "git", True, [{"name": "hub_x"}, {"name": "status"}]),
        ServerTools("git_hub", "git_hub", True, [{"name": "x"}]),
        ServerTools("a", "", True, [{"name": "status"}]),
        ServerTools("b", "", True, [{"name": "status"}]),
    ]
    forward = {t.namespaced_name: t.exposed_name for t in build_catalog(servers).tools}
    backward = {t.namespaced_name: t.exposed_name for t in build_catalog(reversed(servers)).tools}
    assert forward == backward
    assert forward == {
        "git.hub_x": "git__hub_x",
        "git.status": "git__status",
        "git_hub.x": "git_hub__x",
        "a.status": "status" + suffix("a", "status"),
        "b.status": "status" + suffix("b", "status"),
    }

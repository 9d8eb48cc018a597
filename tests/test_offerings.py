"""Routing of resources and prompts: which server owns a URI, a template, a prompt name."""

from __future__ import annotations

import logging

import pytest

from toolkeeper.catalog.offerings import ServerOfferings, build_offerings, template_pattern


def server(name, prefix=None, available=True, resources=(), templates=(), prompts=()):
    return ServerOfferings(
        name,
        name if prefix is None else prefix,
        available,
        [{"uri": uri, "name": uri} for uri in resources],
        [{"uriTemplate": t, "name": t} for t in templates],
        [{"name": p} for p in prompts],
    )


@pytest.mark.parametrize(
    ("template", "uri", "matches"),
    [
        ("test://template/{id}/data", "test://template/123/data", True),
        ("test://template/{id}/data", "test://template/1/2/data", False),
        ("test://template/{id}/data", "test://template/123/data/x", False),
        ("file:///{+path}", "file:///home/me/notes.txt", True),
        ("repo://{owner}/{repo}{?ref}", "repo://me/tk?ref=main", True),
        ("repo://{owner}/{repo}{?ref}", "repo://me/tk", True),
        ("a.b://{x}", "aXb://1", False),  # literal parts are literal, not regular expressions
    ],
)
def test_template_patterns(template, uri, matches):
    assert bool(template_pattern(template).fullmatch(uri)) is matches


def test_uris_route_to_their_server_first_in_config_order_wins(caplog):
    caplog.set_level(logging.WARNING, logger="toolkeeper")
    offerings = build_offerings(
        [
            server("a", resources=["test://shared", "test://a"], templates=["test://template/{id}/data"]),
            server("b", resources=["test://shared", "notes://b"], templates=["notes://{id}"]),
        ]
    )
    assert [r["uri"] for r in offerings.resources] == ["test://shared", "test://a", "notes://b"]
    assert offerings.owner_of("test://shared") == "a"
    assert "test://shared is offered by 'a' and 'b'; 'a' serves it" in caplog.text
    assert offerings.owner_of("notes://b") == "b"
    assert offerings.owner_of("test://template/7/data") == "a"
    assert offerings.owner_of("notes://42") == "b"
    # Not listed, no template: the server that uses the scheme.
    assert offerings.owner_of("test://elsewhere") == "a"
    assert offerings.owner_of("nope://x") is None
    assert offerings.owner_of_template("notes://{id}") == "b"


def test_an_unavailable_servers_offerings_are_not_listed_but_still_routed():
    offerings = build_offerings([server("a", available=False, resources=["x://1"], prompts=["p"])])
    assert offerings.resources == () and offerings.prompts == ()
    assert offerings.owner_of("x://1") == "a"
    assert offerings.prompt_routes["a__p"].server == "a"


def test_prompt_names_follow_the_tool_naming():
    offerings = build_offerings(
        [server("conf", prefix="", prompts=["summarise"]), server("git", prompts=["summarise", "log"])]
    )
    names = [p["name"] for p in offerings.prompts]
    assert names[1:] == ["git__summarise", "git__log"]
    assert names[0] == "summarise"
    assert {n: (r.server, r.name) for n, r in offerings.prompt_routes.items()} == {
        "summarise": ("conf", "summarise"),
        "git__summarise": ("git", "summarise"),
        "git__log": ("git", "log"),
    }


def test_two_unprefixed_prompts_of_the_same_name_get_distinct_names():
    offerings = build_offerings(
        [server("a", prefix="", prompts=["p"]), server("b", prefix="", prompts=["p"])]
    )
    names = [p["name"] for p in offerings.prompts]
    assert len(set(names)) == 2 and all(n.startswith("p_") for n in names)
    assert {offerings.prompt_routes[n].server for n in names} == {"a", "b"}

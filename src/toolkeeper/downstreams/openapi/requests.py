"""One tool call of an OpenAPI operation as one HTTP request, and its response as a tool result.

Arguments go where the operation's parameters say (path, query, header, cookie), in each
parameter's `style` and `explode`. A path value is URL-encoded whole, so it never adds a path
segment, and a path segment a value makes `.` or `..` is sent as `%2E` or `%2E%2E`, which
httpx2 does not remove as it does dot segments (RFC 3986 removes only literal ones): a value
can never change which resource is called.

The body is sent in the media type the converter chose (`bodies.py`): JSON; a form
(`application/x-www-form-urlencoded`), each field in its encoding's `style` and `explode`
(`form` exploded by default: a list repeats its name, an object's entries are fields of their
own; `deepObject` nests in brackets, lists by index: `metadata[key]=v`, `items[0][price]=p`;
`spaceDelimited`/`pipeDelimited` join a list; a field whose `contentType` is JSON is sent as
JSON text), with the standard form encoding (`%5B` for `[`, `+` for a space); multipart, one
part per field (a list one per item) in the order given: text as text, an object as a JSON
part (or, with `style: deepObject`, one text part per bracketed leaf, as a form has them), a
file from its base64 content with its filename and content type; text/plain as UTF-8;
application/octet-stream as the bytes the base64 argument decodes to. A value that cannot be
sent so (base64 that does not decode) refuses the call before anything is sent.

JSON is written and read by the gateway's own codec (`jsonwire`), so numbers pass exactly as
the client wrote them and the API answered them: an integer past 64 bits, a decimal with more
digits than a double holds.

A response is read up to the source's `maxResponseBytes`, and a redirect is followed only
within the origin the request went to (a 307 or 308 sends the same body again).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import httpx2
import jsonschema  # type: ignore[import-untyped]

from toolkeeper import jsonwire
from toolkeeper.config.openapi import Credential
from toolkeeper.downstreams.openapi.bodies import FieldEncoding
from toolkeeper.downstreams.openapi.operations import Operation, Parameter, SecurityScheme

MAX_REDIRECTS = 5
ERROR_EXCERPT_CHARS = 500
# Values in a query, header or cookie: what stays unescaped in each (RFC 3986 `unreserved`).
UNRESERVED = "-._~"
DOT_SEGMENTS = {".": "%2E", "..": "%2E%2E"}
JSON_PART = "application/json"


class CallRefused(Exception):
    """The call cannot be sent as asked (the message says why); nothing was sent."""


@dataclass(frozen=True)
class PreparedRequest:
    method: str
    url: str
    params: tuple[tuple[str, str], ...] = ()
    headers: Mapping[str, str] = field(default_factory=dict)
    cookies: Mapping[str, str] = field(default_factory=dict)
    has_body: bool = False
    content: bytes | None = None  # the body as bytes

    @property
    def shown(self) -> str:
        """The request as messages name it: method and URL, without the query (it may hold a key)."""
        return f"{self.method} {self.url}"


def prepare(
    operation: Operation,
    arguments: Mapping[str, Any],
    *,
    base_url: str,
    headers: Mapping[str, str],
    credentials: Sequence[tuple[SecurityScheme, Credential]],
) -> PreparedRequest:
    """The HTTP request for one call with `arguments` (already checked against the input schema)."""
    path = operation.path
    query: list[tuple[str, str]] = []
    sent_headers: dict[str, str] = dict(headers)
    cookies: dict[str, str] = {}
    for parameter in operation.parameters:
        if parameter.argument not in arguments:
            continue
        value = arguments[parameter.argument]
        if parameter.content_type is not None:  # described by `content`: sent in its media type
            value = _json_text(value)
        if parameter.location == "path":
            if value == "" or value == [] or value == {}:
                raise CallRefused(f"the path parameter '{parameter.argument}' is empty; nothing was sent")
            path = path.replace("{" + parameter.name + "}", _path_value(parameter, value))
        elif parameter.location == "query":
            query.extend(_query_pairs(parameter, value))
        elif parameter.location == "header":
            sent_headers[parameter.name] = _simple(value, explode=parameter.explode)
        else:
            cookies[parameter.name] = _simple(value, explode=False)
    for parameter in operation.parameters:
        if parameter.location == "path" and ("{" + parameter.name + "}" in path):
            raise CallRefused(f"the path parameter '{parameter.argument}' has no value; nothing was sent")
    for scheme, credential in credentials:
        _authorize(scheme, credential, query=query, headers=sent_headers, cookies=cookies)
    body, has_body = _body(operation, arguments)
    content: bytes | None = None
    media_type = operation.body_media_type
    if has_body and operation.body_kind == "json":
        content = jsonwire.dumps(body)
        if not media_type or "*" in media_type:
            media_type = JSON_PART
    elif has_body:
        content, media_type = _encoded_body(operation, body)
    if has_body and media_type and "*" not in media_type:
        sent_headers["Content-Type"] = media_type
    return PreparedRequest(
        method=operation.method,
        url=base_url.rstrip("/") + _without_dot_segments(path),
        params=tuple(query),
        headers=sent_headers,
        cookies=cookies,
        has_body=has_body,
        content=content,
    )


def _json_text(value: Any) -> str:
    """A value as JSON text, every number exactly as the client wrote it."""
    return jsonwire.dumps(value).decode()


def _without_dot_segments(path: str) -> str:
    """The path with every segment that is `.` or `..` (as values can make them) percent-encoded,
    so neither httpx2 nor the server removes it (RFC 3986 normalizes only the literal dots)."""
    segments = path.split("/")
    return "/".join(DOT_SEGMENTS.get(segment, segment) for segment in segments)


def _path_value(parameter: Parameter, value: Any) -> str:
    """A path parameter in its style (`simple`, `label` or `matrix`), every value URL-encoded."""
    encoded = _encoded(value)
    style = parameter.style
    if style == "label":
        return "." + _joined(encoded, parameter.explode, "." if parameter.explode else ",")
    if style == "matrix":
        if isinstance(encoded, dict):
            if parameter.explode:
                return "".join(f";{k}={v}" for k, v in encoded.items())
            return f";{parameter.name}=" + ",".join(f"{k},{v}" for k, v in encoded.items())
        if isinstance(encoded, list):
            if parameter.explode:
                return "".join(f";{parameter.name}={v}" for v in encoded)
            return f";{parameter.name}=" + ",".join(encoded)
        return f";{parameter.name}={encoded}"
    return _joined(encoded, parameter.explode, ",")


def _encoded(value: Any) -> Any:
    """The value with every scalar as URL-encoded text (nothing left that adds a path segment)."""
    if isinstance(value, dict):
        return {quote(str(k), safe=UNRESERVED): quote(_scalar(v), safe=UNRESERVED) for k, v in value.items()}
    if isinstance(value, list):
        return [quote(_scalar(v), safe=UNRESERVED) for v in value]
    return quote(_scalar(value), safe=UNRESERVED)


def _joined(value: Any, explode: bool, separator: str) -> str:
    if isinstance(value, dict):
        if explode:
            return separator.join(f"{k}={v}" for k, v in value.items())
        return ",".join(f"{k},{v}" for k, v in value.items())
    if isinstance(value, list):
        return separator.join(value)
    return str(value)


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if isinstance(value, dict | list):
        return _json_text(value)
    if isinstance(value, jsonwire.ExactNumber):
        return value.text
    return str(value)


def _simple(value: Any, *, explode: bool) -> str:
    """A header or cookie value: arrays comma-joined, objects as `k,v` or (exploded) `k=v` pairs."""
    if isinstance(value, dict):
        if explode:
            return ",".join(f"{k}={_scalar(v)}" for k, v in value.items())
        return ",".join(f"{k},{_scalar(v)}" for k, v in value.items())
    if isinstance(value, list):
        return ",".join(_scalar(v) for v in value)
    return _scalar(value)


def _query_pairs(parameter: Parameter, value: Any) -> list[tuple[str, str]]:
    """A query parameter in its style: `form` (the default), `spaceDelimited`, `pipeDelimited` or
    `deepObject`. httpx2 encodes the pairs."""
    name, style, explode = parameter.name, parameter.style, parameter.explode
    if isinstance(value, dict):
        if style == "deepObject":
            return [(f"{name}[{k}]", _scalar(v)) for k, v in value.items()]
        if explode:
            return [(str(k), _scalar(v)) for k, v in value.items()]
        return [(name, ",".join(f"{k},{_scalar(v)}" for k, v in value.items()))]
    if isinstance(value, list):
        if style == "spaceDelimited" and not explode:
            return [(name, " ".join(_scalar(v) for v in value))]
        if style == "pipeDelimited" and not explode:
            return [(name, "|".join(_scalar(v) for v in value))]
        if explode:
            return [(name, _scalar(v)) for v in value]
        return [(name, ",".join(_scalar(v) for v in value))]
    return [(name, _scalar(value))]


def _authorize(
    scheme: SecurityScheme,
    credential: Credential,
    *,
    query: list[tuple[str, str]],
    headers: dict[str, str],
    cookies: dict[str, str],
) -> None:
    value = credential.value
    if value is None:  # never a placeholder: a scheme without a value sends nothing
        return
    if scheme.type == "apiKey" and scheme.parameter:
        if scheme.location == "query":
            query.append((scheme.parameter, value))
        elif scheme.location == "cookie":
            cookies[scheme.parameter] = value
        else:
            headers[scheme.parameter] = value
    elif scheme.type == "http" and (scheme.scheme or "").lower() == "basic":
        token = value if ":" not in value else base64.b64encode(value.encode()).decode()
        headers["Authorization"] = f"Basic {token}"
    elif scheme.type == "http":
        headers["Authorization"] = f"Bearer {value}"


def _body(operation: Operation, arguments: Mapping[str, Any]) -> tuple[Any, bool]:
    """The body's value, and whether one is sent (an empty object when the body is required)."""
    if operation.body_arguments is not None:
        body = {prop: arguments[arg] for arg, prop in operation.body_arguments.items() if arg in arguments}
        return body, bool(body) or operation.body_required
    if operation.body_argument is not None and operation.body_argument in arguments:
        return arguments[operation.body_argument], True
    return None, False


def _encoded_body(operation: Operation, value: Any) -> tuple[bytes, str | None]:
    """A body that is not JSON as the bytes to send, and its Content-Type."""
    media_type = operation.body_media_type
    kind = operation.body_kind
    if kind == "text":
        text = value if isinstance(value, str) else _scalar(value)
        return text.encode(), media_type
    if kind == "binary":
        try:
            return base64.b64decode(str(value), validate=True), media_type
        except (binascii.Error, ValueError):
            raise CallRefused("the body is not valid base64; nothing was sent") from None
    fields = value if isinstance(value, Mapping) else {}
    if kind == "form":
        pairs = [
            pair
            for name, item in fields.items()
            for pair in _form_pairs(name, item, _encoding(operation, name))
        ]
        return urlencode(pairs).encode(), media_type
    return _multipart(operation, fields)


def _encoding(operation: Operation, name: str) -> FieldEncoding:
    return operation.body_encodings.get(name) or FieldEncoding()


def _form_pairs(name: str, value: Any, encoding: FieldEncoding) -> list[tuple[str, str]]:
    """One form field as (name, value) pairs, as its encoding's style says."""
    if encoding.content_type is not None and _is_json_type(encoding.content_type):
        return [(name, _json_text(value))]
    if encoding.style == "deepObject" and isinstance(value, dict | list):
        return _nested_pairs(name, value)
    parameter = Parameter(name, "query", name, False, encoding.style, encoding.explode)
    return _query_pairs(parameter, value)


def _nested_pairs(name: str, value: Any) -> list[tuple[str, str]]:
    """`deepObject`: an object's entries as `name[key]`, a list's items as `name[0]`, nested."""
    if isinstance(value, dict):
        return [pair for key, item in value.items() for pair in _nested_pairs(f"{name}[{key}]", item)]
    if isinstance(value, list):
        return [pair for index, item in enumerate(value) for pair in _nested_pairs(f"{name}[{index}]", item)]
    return [(name, _scalar(value))]


def _multipart(operation: Operation, fields: Mapping[str, Any]) -> tuple[bytes, str | None]:
    """The multipart/form-data body (its boundary in the Content-Type httpx2 makes)."""
    parts: list[tuple[str, Any]] = []
    for name, value in fields.items():
        encoding = _encoding(operation, name)
        if encoding.style == "deepObject" and not encoding.file and isinstance(value, dict | list):
            # As Stripe reads its multipart forms: one text part per bracketed leaf.
            parts.extend((key, (None, text.encode(), None)) for key, text in _nested_pairs(name, value))
            continue
        items = (
            value
            if isinstance(value, list) and (encoding.file or not _is_json_type(encoding.content_type))
            else [value]
        )
        parts.extend((name, _part(name, item, encoding)) for item in items)
    built = httpx2.Request("POST", "http://multipart.invalid/", files=parts)
    return built.read(), built.headers.get("content-type")


def _part(name: str, value: Any, encoding: FieldEncoding) -> tuple[str | None, bytes, str | None]:
    """One part: (filename, bytes, Content-Type)."""
    if encoding.file:
        if not isinstance(value, Mapping) or not isinstance(value.get("base64"), str):
            raise CallRefused(
                f"the file '{name}' is not given as an object with base64 content; nothing was sent"
            )
        try:
            data = base64.b64decode(value["base64"], validate=True)
        except (binascii.Error, ValueError):
            raise CallRefused(f"the file '{name}' is not valid base64; nothing was sent") from None
        filename = value.get("filename") if isinstance(value.get("filename"), str) else name
        content_type = value.get("contentType") if isinstance(value.get("contentType"), str) else None
        return filename, data, content_type or encoding.content_type or "application/octet-stream"
    if isinstance(value, dict | list) or _is_json_type(encoding.content_type):
        return None, jsonwire.dumps(value), encoding.content_type or JSON_PART
    return None, _scalar(value).encode(), encoding.content_type


def _is_json_type(media_type: str | None) -> bool:
    kind = (media_type or "").split(";")[0].strip().lower()
    return kind == "application/json" or kind.endswith("+json")


async def send(
    client: httpx2.AsyncClient,
    request: PreparedRequest,
    *,
    max_bytes: int,
    output: Any | None = None,
) -> dict[str, Any]:
    """Send `request`, following redirects within its origin, and make the response a tool result
    (its JSON as `structuredContent` where `output`, the validator of the tool's outputSchema,
    allows)."""
    method, url = request.method, request.url
    params: list[tuple[str, str]] = list(request.params)
    body_sent = request.has_body
    for _ in range(MAX_REDIRECTS + 1):
        headers = dict(request.headers)
        if request.cookies:
            headers["Cookie"] = "; ".join(
                f"{name}={quote(value, safe=UNRESERVED)}" for name, value in request.cookies.items()
            )
        built = client.build_request(
            method,
            url,
            params=tuple(params) or None,
            headers=headers,
            content=request.content if body_sent else None,
        )
        response = await client.send(built, stream=True)
        try:
            if not response.is_redirect:
                body, cut = await _read_capped(response, max_bytes)
                shown = f"{method} {url}"
                result, parsed = _result(response, body, cut=cut, max_bytes=max_bytes, shown=shown)
                return _with_structured(result, parsed, output, shown=shown)
            target = response.next_request
        finally:
            await response.aclose()
        if target is None:
            break
        if _origin(str(target.url)) != _origin(url):
            return error(
                f"{method} {url} redirected to {_origin(str(target.url))}, another origin; "
                "toolkeeper follows redirects only within the API's own origin"
            )
        method, url = target.method, str(target.url.copy_with(query=None))
        params = target.url.params.multi_items()
        body_sent = body_sent and method not in ("GET", "HEAD")
    return error(f"{request.shown} redirected more than {MAX_REDIRECTS} times; not followed further")


def _origin(url: str) -> str:
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.scheme}://{(parts.hostname or '').lower()}:{port}"


async def _read_capped(response: httpx2.Response, max_bytes: int) -> tuple[bytes, bool]:
    """At most `max_bytes` of the body, and whether there was more."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        chunks.append(chunk)
        size += len(chunk)
        if size > max_bytes:
            return b"".join(chunks)[:max_bytes], True
    return b"".join(chunks), False


def _result(
    response: httpx2.Response, body: bytes, *, cut: bool, max_bytes: int, shown: str
) -> tuple[dict[str, Any], Any]:
    """The tool result, and the body's JSON (None when it has none)."""
    text = body.decode(response.encoding or "utf-8", errors="replace")
    if not response.is_success:
        excerpt = text[:ERROR_EXCERPT_CHARS] + ("…" if len(text) > ERROR_EXCERPT_CHARS or cut else "")
        reason = response.reason_phrase or "no reason given"
        message = f"{shown} answered {response.status_code} {reason}"
        return error(f"{message}: {excerpt}" if excerpt.strip() else message), None
    if cut:
        note = (
            f"[the response was cut at {max_bytes} bytes (the server's maxResponseBytes); "
            "ask for less, e.g. with a smaller page or a filter]"
        )
        return {"content": [{"type": "text", "text": f"{text}\n{note}"}]}, None
    if not text.strip():
        # An empty success (204 after a DELETE) still tells the model what happened.
        text = f"{shown} answered {response.status_code} {response.reason_phrase or ''}".rstrip()
        return {"content": [{"type": "text", "text": text}]}, None
    result: dict[str, Any] = {"content": [{"type": "text", "text": text}]}
    if _is_json(response):
        try:
            return result, jsonwire.loads(text.encode())
        except ValueError:
            pass
    return result, None


def _is_json(response: httpx2.Response) -> bool:
    kind = str(response.headers.get("content-type", "")).split(";")[0].strip().lower()
    return kind == "application/json" or kind.endswith("+json")


def _with_structured(
    result: dict[str, Any], parsed: Any, output: Any | None, *, shown: str
) -> dict[str, Any]:
    """The result with its JSON as `structuredContent` where MCP allows it: an object, and, for
    a tool with an `outputSchema` (`output`, its validator), one that matches it. Such a tool
    must return matching structured content (clients check it), so a response that does not is
    an error result that says why and still holds the response."""
    if result.get("isError"):
        return result
    if output is None:
        if isinstance(parsed, dict):
            result["structuredContent"] = parsed
        return result
    problem = _mismatch(parsed, output)
    if problem is None:
        result["structuredContent"] = parsed
        return result
    text = result["content"][0]["text"]
    return error(f"{shown} answered, but {problem}, so it is not this tool's output as declared:\n{text}")


def _mismatch(parsed: Any, output: Any) -> str | None:
    if not isinstance(parsed, dict):
        return "the response is not a whole JSON object"
    best = jsonschema.exceptions.best_match(output.iter_errors(parsed))
    if best is None:
        return None
    where = "/".join(str(p) for p in best.absolute_path) or "the top"
    return f"the response does not match the spec's schema at {where}: {best.message}"


def error(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": True}

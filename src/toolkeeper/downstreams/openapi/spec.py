"""Loading an OpenAPI 3.0 or 3.1 document, with every document it refers to.

A spec is a file path or an http(s) URL, written in JSON or YAML. Large APIs publish theirs
split over many files and folders, joined by relative `$ref`s (`../schemas/pet.yaml`,
`common.yaml#/components/parameters/Limit`): `load_spec` reads the root document, then every
document a `$ref` names, relative to the document the `$ref` stands in, until none is left.
Every document read is registered, under its absolute URI, in a `referencing.Registry`, and
every `$ref` is resolved by `referencing` (JSON pointers into a document included); no
reference is followed here by hand. Each distinct `$ref` is looked up once while loading, so a
`$ref` to nowhere is a load error that names it, not a surprise during conversion.

The libraries, and why:
- `referencing` resolves references: it is what `jsonschema` resolves with (so it is installed
  and maintained with it), it resolves JSON pointers and relative URIs exactly as JSON Schema
  does, and its registry holds documents we fetched ourselves (a retrieve step we control, so
  a file is read or a URL fetched once, with our timeout and our error messages);
- PyYAML with its libyaml-backed safe loader (`CSafeLoader`, the pure-Python one where libyaml
  is missing): only plain data, never Python objects, and a tenth of the pure loader's time.
  Dates stay strings (JSON has no dates), and a number used as a key (`200:` under
  `responses`) becomes the string JSON would have;
- orjson reads JSON, and turns what YAML read into plain JSON data;
- httpx2 (the HTTP client the MCP SDK brings) fetches http(s) documents, synchronously: the
  source loads a spec in a worker thread.

The document's structure is checked only where the converter relies on it (`_Checker`), with
the first problem named by its place (`paths./pets.get.responses: required`): a full
validator (openapi-spec-validator) checks every schema keyword against the OpenAPI
meta-schemas, which costs seconds on a large spec and rejects specs that convert perfectly
well.

A document fetched over http(s) may refer only to other http(s) documents: a spec from the
network never makes toolkeeper read a local file. Redirects are followed; relative references
are resolved against the URL asked for, not the one redirected to.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import unquote, urldefrag, urljoin, urlsplit
from urllib.request import url2pathname

import orjson
import yaml
from referencing import Registry, Resource
from referencing.exceptions import Unresolvable

from toolkeeper.config.openapi import foreign_spec_location, is_web_url

MAX_REF_CHAIN = 32  # a $ref to a $ref to …: more hops than this is a loop
_REF = re.compile(rb'"\$ref"\s*:\s*("(?:[^"\\]|\\.)*")')
_VERSION = re.compile(r"3\.([01])\.\d+")
HTTP_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
PARAMETER_LOCATIONS = ("path", "query", "header", "cookie")


class SpecError(Exception):
    """A spec cannot be used: the message names the file or URL and its first problem."""


_BaseLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_BaseLoader):  # type: ignore[misc]
    """The safe loader without YAML 1.1 timestamps: a date in an example stays a string."""

    yaml_implicit_resolvers: ClassVar[dict[Any, Any]] = {
        first: [(tag, pattern) for tag, pattern in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for first, resolvers in _BaseLoader.yaml_implicit_resolvers.items()
    }

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._plain_tags: dict[str, str] = {}

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        # A plain scalar's tag depends on its text alone, and a spec repeats the same few words
        # ("type", "string", "description") tens of thousands of times: a third of the load.
        if kind is yaml.ScalarNode and implicit[0]:
            try:
                return self._plain_tags[value]
            except KeyError:
                tag = self._plain_tags[value] = super().resolve(kind, value, implicit)
                return tag
        return super().resolve(kind, value, implicit)


@dataclass(frozen=True)
class LoadedSpec:
    """A spec and every document it refers to.

    `uri` is the root document's absolute URI (`file://…` for a file); `registry` holds every
    document read under its URI. `resolve` follows a node's `$ref` (and the `$ref`s it leads
    to) and says which document the result stands in, for the relative `$ref`s inside it.
    """

    location: str
    version: str
    document: Mapping[str, Any]
    files: tuple[str, ...]
    uri: str
    registry: Registry[Any]
    _looked_up: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    _joined: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict, compare=False, repr=False)

    @property
    def is_30(self) -> bool:
        """OpenAPI 3.0, whose schemas are not quite JSON Schema (`nullable`, boolean
        `exclusiveMinimum`); 3.1's are JSON Schema 2020-12."""
        return self.version.startswith("3.0.")

    def lookup(self, absolute: str) -> Any:
        """What the absolute reference `absolute` (URI and fragment) points to."""
        try:
            return self._looked_up[absolute]
        except KeyError:
            pass
        try:
            found = self.registry.resolver().lookup(absolute).contents
        except Unresolvable:
            raise SpecError(f"spec {self.location}: $ref {absolute} cannot be resolved") from None
        self._looked_up[absolute] = found
        return found

    def join(self, base: str, ref: str) -> tuple[str, str]:
        """The absolute form of `ref` written in the document at `base`, and its document's URI."""
        try:
            return self._joined[(base, ref)]
        except KeyError:
            absolute = urljoin(base, ref)
            joined = self._joined[(base, ref)] = (absolute, urldefrag(absolute).url)
            return joined

    def resolve(self, node: Any, base: str) -> tuple[Any, str]:
        """`node` with its `$ref`s followed, and the URI of the document it stands in."""
        for _ in range(MAX_REF_CHAIN):
            ref = node.get("$ref") if isinstance(node, Mapping) else None
            if not isinstance(ref, str):
                return node, base
            absolute, document = self.join(base, ref)
            node, base = self.lookup(absolute), document
        raise SpecError(f"spec {self.location}: $ref {node.get('$ref')} leads round in a loop of $refs")


def load_spec(location: str, *, timeout: float = 30.0) -> LoadedSpec:
    """Read the spec at `location` (a file path or an http(s) URL) and every document its
    `$ref`s name; check what the converter relies on. Raises `SpecError`."""
    if foreign_spec_location(location):
        raise SpecError(f"spec {location}: a spec is a file path or an http:// or https:// URL")
    is_url = is_web_url(location)
    shown = location if is_url else str(Path(location).expanduser().resolve())
    root_uri = location if is_url else Path(shown).as_uri()
    with _Reader(shown=shown, timeout=timeout) as reader:
        documents = reader.read_all(root_uri)
    registry: Registry[Any] = Registry().with_resources(
        (uri, Resource.opaque(contents)) for uri, (contents, _) in documents.items()
    )
    root = documents[root_uri][0]
    if not isinstance(root, Mapping):
        raise SpecError(f"spec {shown}: the document is not a mapping (an OpenAPI document is an object)")
    version = _version(root, shown)
    spec = LoadedSpec(
        location=shown,
        version=version,
        document=root,
        files=tuple(_path_of(uri) for uri in documents if uri.startswith("file:")),
        uri=urldefrag(root_uri).url,
        registry=registry,
    )
    for uri, (contents, refs) in documents.items():
        _check_refs(spec, uri=uri, contents=contents, refs=refs)
    _Checker(spec).check()
    return spec


def _version(root: Mapping[str, Any], shown: str) -> str:
    if "swagger" in root and "openapi" not in root:
        raise SpecError(f"spec {shown}: swagger: Swagger 2.0 is not supported; convert it to OpenAPI 3 first")
    version = root.get("openapi")
    if version is None:
        raise SpecError(f"spec {shown}: openapi: required")
    if not isinstance(version, str) or not _VERSION.match(version):
        raise SpecError(f"spec {shown}: openapi: version {version!r} is not supported (3.0.x or 3.1.x)")
    return version


def _path_of(uri: str) -> str:
    return url2pathname(unquote(urlsplit(uri).path))


class _Reader:
    """Reads documents (files, or URLs with one HTTP client) and the `$ref`s each holds."""

    def __init__(self, *, shown: str, timeout: float) -> None:
        self.shown = shown
        self.timeout = timeout
        self._client: Any = None

    def __enter__(self) -> _Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._client is not None:
            self._client.close()

    def read_all(self, root_uri: str) -> dict[str, tuple[Any, tuple[str, ...]]]:
        """Every document reachable from the root by `$ref`s: its contents and its `$ref`s."""
        documents: dict[str, tuple[Any, tuple[str, ...]]] = {}
        waiting: list[tuple[str, str | None]] = [(urldefrag(root_uri).url, None)]
        while waiting:
            uri, referrer = waiting.pop()
            if uri in documents:
                continue
            contents, refs = self.read(uri, referrer=referrer)
            documents[uri] = (contents, refs)
            for ref in refs:
                target = urldefrag(urljoin(uri, ref)).url
                if target not in documents:
                    waiting.append((target, uri))
        return documents

    def read(self, uri: str, *, referrer: str | None) -> tuple[Any, tuple[str, ...]]:
        scheme = urlsplit(uri).scheme
        where = "" if referrer is None else f" (referred to from {_shown_uri(referrer)})"
        if scheme == "file":
            if referrer is not None and not referrer.startswith("file:"):
                raise SpecError(
                    f"spec {self.shown}: {_shown_uri(referrer)} refers to the local file {_path_of(uri)}: "
                    "a spec from the network may refer only to http(s) documents"
                )
            data = self._read_file(uri, where)
        elif scheme in ("http", "https"):
            data = self._fetch(uri, where)
        else:
            raise SpecError(
                f"spec {self.shown}: cannot read {uri}{where}: only files and http(s) URLs are read"
            )
        contents, text = self._parse(data, uri)
        refs = {orjson.loads(match) for match in _REF.findall(text)}
        return contents, tuple(sorted(ref for ref in refs if isinstance(ref, str)))

    def _read_file(self, uri: str, where: str) -> bytes:
        path = _path_of(uri)
        try:
            return Path(path).read_bytes()
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            raise SpecError(f"spec {self.shown}: cannot read {path}{where}: {reason}") from None

    def _fetch(self, uri: str, where: str) -> bytes:
        import httpx2  # only a spec on the network needs an HTTP client

        if self._client is None:
            self._client = httpx2.Client(timeout=self.timeout, follow_redirects=True)
        try:
            response = self._client.get(uri)
        except httpx2.HTTPError as exc:
            reason = str(exc) or type(exc).__name__
            raise SpecError(f"spec {self.shown}: cannot fetch {uri}{where}: {reason}") from None
        if response.status_code != 200:
            raise SpecError(
                f"spec {self.shown}: cannot fetch {uri}{where}: HTTP {response.status_code} "
                f"{response.reason_phrase}"
            )
        return bytes(response.content)

    def _parse(self, data: bytes, uri: str) -> tuple[Any, bytes]:
        """The document's contents as plain JSON data, and JSON text to find its `$ref`s in."""
        shown = _shown_uri(uri)
        shown = "the document" if shown == self.shown else shown
        looks_json = data.lstrip()[:1] in (b"{", b"[") or uri.endswith(".json")
        if looks_json:
            try:
                return orjson.loads(data), data
            except orjson.JSONDecodeError as exc:
                raise SpecError(
                    f"spec {self.shown}: {shown} is not valid JSON (line {exc.lineno}, column {exc.colno}: "
                    f"{exc.msg})"
                ) from None
        try:
            loaded = yaml.load(data, Loader=_Loader)  # a safe loader: plain data only
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
            problem = getattr(exc, "problem", None) or str(exc)
            raise SpecError(f"spec {self.shown}: {shown} is not valid YAML ({at}{problem})") from None
        try:
            text = orjson.dumps(loaded, option=orjson.OPT_NON_STR_KEYS)
        except (TypeError, orjson.JSONEncodeError) as exc:
            raise SpecError(f"spec {self.shown}: {shown} holds what JSON cannot ({exc})") from None
        return orjson.loads(text), text


def _shown_uri(uri: str) -> str:
    return _path_of(uri) if uri.startswith("file:") else uri


def _check_refs(spec: LoadedSpec, *, uri: str, contents: Any, refs: tuple[str, ...]) -> None:
    """Every `$ref` in one document points somewhere; the first that does not is named with
    the place it stands."""
    for ref in refs:
        try:
            spec.lookup(urljoin(uri, ref))
        except SpecError:
            place = next(_places_of_ref(contents, ref, ()), ())
            where = f"{_shown_uri(uri)}: " if uri != spec.uri else ""
            raise SpecError(
                f"spec {spec.location}: {where}{_dotted(place) or '$ref'}: $ref {ref!r} points to nothing"
            ) from None


def _places_of_ref(node: Any, ref: str, place: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
    if isinstance(node, Mapping):
        if node.get("$ref") == ref:
            yield place
        for key, value in node.items():
            yield from _places_of_ref(value, ref, (*place, str(key)))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _places_of_ref(value, ref, (*place, str(index)))


def _dotted(place: tuple[str, ...]) -> str:
    return ".".join(place)


class _Checker:
    """The structure the converter relies on, checked in document order; the first problem
    raises `SpecError` naming its place."""

    def __init__(self, spec: LoadedSpec) -> None:
        self.spec = spec

    def fail(self, place: tuple[str, ...], problem: str) -> SpecError:
        return SpecError(f"spec {self.spec.location}: {_dotted(place)}: {problem}")

    def mapping(self, node: Any, base: str, place: tuple[str, ...]) -> tuple[Mapping[str, Any], str]:
        node, base = self.spec.resolve(node, base)
        if not isinstance(node, Mapping):
            raise self.fail(place, f"must be an object, not {_kind(node)}")
        return node, base

    def items(self, node: Any, place: tuple[str, ...]) -> list[Any]:
        if not isinstance(node, list):
            raise self.fail(place, f"must be a list, not {_kind(node)}")
        return node

    def check(self) -> None:
        root, base = self.spec.document, self.spec.uri
        info = root.get("info")
        if info is None:
            raise self.fail(("info",), "required")
        info, _ = self.mapping(info, base, ("info",))
        if not isinstance(info.get("title"), str):
            raise self.fail(("info", "title"), "required (a string)")
        for index, server in enumerate(self.items(root.get("servers", []), ("servers",))):
            server, _ = self.mapping(server, base, ("servers", str(index)))
            if not isinstance(server.get("url"), str):
                raise self.fail(("servers", str(index), "url"), "required (a string)")
        self.check_security_schemes(root, base)
        if "paths" not in root:
            if self.spec.is_30:
                raise self.fail(("paths",), "required")
            return
        paths, base = self.mapping(root["paths"], base, ("paths",))
        for path, item in paths.items():
            if path.startswith("x-"):  # an extension, not a path
                continue
            if not path.startswith("/"):
                raise self.fail(("paths", path), "a path must start with /")
            self.check_path_item(item, base, ("paths", path))

    def check_security_schemes(self, root: Mapping[str, Any], base: str) -> None:
        components, _ = self.mapping(root.get("components", {}), base, ("components",))
        place = ("components", "securitySchemes")
        schemes, _ = self.mapping(components.get("securitySchemes", {}), base, place)
        for name, scheme in schemes.items():
            scheme, _ = self.mapping(scheme, base, (*place, name))
            kind = scheme.get("type")
            if not isinstance(kind, str):
                raise self.fail((*place, name, "type"), "required (a string)")
            if kind == "apiKey":
                for key in ("name", "in"):
                    if not isinstance(scheme.get(key), str):
                        raise self.fail((*place, name, key), "required (a string)")
            if kind == "http" and not isinstance(scheme.get("scheme"), str):
                raise self.fail((*place, name, "scheme"), "required (a string)")

    def check_path_item(self, item: Any, base: str, place: tuple[str, ...]) -> None:
        item, base = self.mapping(item, base, place)
        self.check_parameters(item.get("parameters", []), base, (*place, "parameters"))
        for method in HTTP_METHODS:
            if method in item:
                self.check_operation(item[method], base, (*place, method))

    def check_operation(self, operation: Any, base: str, place: tuple[str, ...]) -> None:
        operation, base = self.mapping(operation, base, place)
        operation_id = operation.get("operationId")
        if operation_id is not None and not isinstance(operation_id, str):
            raise self.fail((*place, "operationId"), "must be a string")
        for index, tag in enumerate(self.items(operation.get("tags", []), (*place, "tags"))):
            if not isinstance(tag, str):
                raise self.fail((*place, "tags", str(index)), "must be a string")
        self.check_parameters(operation.get("parameters", []), base, (*place, "parameters"))
        if "requestBody" in operation:
            body, _ = self.mapping(operation["requestBody"], base, (*place, "requestBody"))
            if "content" not in body:
                raise self.fail((*place, "requestBody", "content"), "required")
            self.mapping(body["content"], base, (*place, "requestBody", "content"))
        if "responses" not in operation:
            if self.spec.is_30:
                raise self.fail((*place, "responses"), "required")
        else:
            responses, _ = self.mapping(operation["responses"], base, (*place, "responses"))
            for status, response in responses.items():
                self.mapping(response, base, (*place, "responses", status))
        for index, requirement in enumerate(self.items(operation.get("security", []), (*place, "security"))):
            if not isinstance(requirement, Mapping):
                raise self.fail(
                    (*place, "security", str(index)), f"must be an object, not {_kind(requirement)}"
                )

    def check_parameters(self, parameters: Any, base: str, place: tuple[str, ...]) -> None:
        for index, parameter in enumerate(self.items(parameters, place)):
            at = (*place, str(index))
            parameter, _ = self.mapping(parameter, base, at)
            if not isinstance(parameter.get("name"), str):
                raise self.fail((*at, "name"), "required (a string)")
            if parameter.get("in") not in PARAMETER_LOCATIONS:
                raise self.fail((*at, "in"), f"must be one of {', '.join(PARAMETER_LOCATIONS)}")


def _kind(node: Any) -> str:
    if isinstance(node, list):
        return "a list"
    if isinstance(node, str):
        return "a string"
    if node is None:
        return "null"
    return f"a {type(node).__name__}"

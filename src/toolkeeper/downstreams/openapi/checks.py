"""A loaded spec's structure, checked where the converter relies on it, and what each problem
costs: the whole spec, or the operations it stands in.

- The document's own structure (`info.title`, `servers`, `components.securitySchemes`, `paths`
  being an object) refuses the spec, with the first problem named by its place
  (`info.title: required (a string)`).
- A problem inside one path item or operation leaves out only that: a `$ref` to nowhere anywhere
  beneath it (followed through components and other files), a malformed parameter or request
  body, `responses` missing (3.0), an operation or path item that is not an object. It is kept in
  `LoadedSpec.problems` under `(path, method)`, or `(path, "")` for every operation of a path
  item, with a reason naming the place (`$ref 'models/x.yml#/Pet' points to nothing
  (paths./pets.get.requestBody)`); the converter leaves exactly those out, with that reason.
  A `$ref` to nowhere that no operation reaches (an unused component) costs nothing.

Finding the `$ref`s to nowhere: every distinct `$ref` of every document is looked up once; only
when some point nowhere is the graph of references walked (each target once for the spec) to
find which operations reach one.

A full validator (openapi-spec-validator) is not used: it checks every schema keyword against the
OpenAPI meta-schemas, costs seconds on a large spec and rejects specs that convert perfectly well.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from toolkeeper.downstreams.openapi.documents import Documents
from toolkeeper.downstreams.openapi.loaded import (
    HTTP_METHODS,
    PARAMETER_LOCATIONS,
    LoadedSpec,
    SpecError,
)

Place = tuple[str, ...]
# What a path item holds for all its operations, besides them.
PATH_ITEM_PARTS = ("parameters", "servers")


def find_problems(spec: LoadedSpec, documents: Documents) -> dict[tuple[str, str], str]:
    """The operations `spec`'s problems leave out, with why. Raises `SpecError` for a problem of
    the document itself."""
    problems: dict[tuple[str, str], str] = {}
    dangling = _dangling(spec, documents)
    checker = _Checker(spec, problems)
    paths, base = checker.check_document()
    if dangling:
        _RefProblems(spec, documents, dangling).find(paths, base, problems)
    checker.check_paths(paths, base)
    return problems


def _dangling(spec: LoadedSpec, documents: Documents) -> dict[str, str]:
    """Each absolute `$ref` that points nowhere, with why (after the `$ref` as written)."""
    dangling: dict[str, str] = {}
    for uri, document in documents.read.items():
        for ref in document.refs:
            absolute, target = spec.join(uri, ref)
            try:
                spec.lookup(absolute)
            except SpecError:
                why = documents.unreadable.get(target)
                dangling[absolute] = f"cannot be followed: {why}" if why else "points to nothing"
    return dangling


def _is_ref(node: Any) -> bool:
    return isinstance(node, Mapping) and isinstance(node.get("$ref"), str)


def _dotted(place: Place) -> str:
    return ".".join(place)


def _pointer(place: Place) -> str:
    return "/".join(part.replace("~", "~0").replace("/", "~1") for part in place)


def _refs_under(node: Any, place: Place) -> Iterator[tuple[Place, str]]:
    """Every `$ref` string beneath `node` (itself included), with its place, in document order."""
    waiting: list[tuple[Any, Place]] = [(node, place)]
    while waiting:
        node, place = waiting.pop()
        if isinstance(node, Mapping):
            ref = node.get("$ref")
            if isinstance(ref, str):
                yield place, ref
            waiting.extend((value, (*place, str(key))) for key, value in reversed(list(node.items())))
        elif isinstance(node, list):
            waiting.extend((value, (*place, str(i))) for i, value in reversed(list(enumerate(node))))


class _RefProblems:
    """Which path items and operations reach a `$ref` to nowhere, directly or through others."""

    def __init__(self, spec: LoadedSpec, documents: Documents, dangling: dict[str, str]) -> None:
        self.spec = spec
        self.dangling = dangling
        # A target that leads to a $ref to nowhere: the reason, naming where that $ref stands.
        self.leads: dict[str, str] = {}
        self._reach_dangling(documents)

    def _reach_dangling(self, documents: Documents) -> None:
        """Walk every target once, noting who refers to whom; then, backwards from each `$ref`
        to nowhere, mark every target that leads there."""
        referred_from: dict[str, list[tuple[str, Place, str]]] = {}  # target: (referrer, place, ref)
        waiting = list(
            {self.spec.join(uri, ref)[0] for uri, doc in documents.read.items() for ref in doc.refs}
        )
        seen = set(waiting)
        while waiting:
            target = waiting.pop()
            if target in self.dangling:
                continue
            try:
                contents = self.spec.lookup(target)
            except SpecError:
                self.dangling[target] = "points to nothing"
                continue
            document = self.spec.join(target, "")[1]
            for place, ref in _refs_under(contents, ()):
                absolute = self.spec.join(document, ref)[0]
                referred_from.setdefault(absolute, []).append((target, place, ref))
                if absolute not in seen:
                    seen.add(absolute)
                    waiting.append(absolute)
        marked: list[str] = []
        for absolute, why in self.dangling.items():
            for referrer, place, ref in referred_from.get(absolute, ()):
                if referrer not in self.leads:
                    where = f"{self._shown(referrer)}/{_pointer(place)}".rstrip("/")
                    self.leads[referrer] = f"$ref {ref!r} {why} (at {where}"
                    marked.append(referrer)
        while marked:
            target = marked.pop()
            for referrer, _, _ in referred_from.get(target, ()):
                if referrer not in self.leads:
                    self.leads[referrer] = self.leads[target]
                    marked.append(referrer)

    def _shown(self, absolute: str) -> str:
        """`absolute` as short as it can be said: a fragment of the root, or relative to its folder."""
        if absolute.startswith(self.spec.uri + "#"):
            return absolute[len(self.spec.uri) :]
        folder = self.spec.uri.rsplit("/", 1)[0] + "/"
        shown = absolute.removeprefix(folder)
        return shown if "#" in shown else f"{shown}#"

    def reason(self, node: Any, base: str, place: Place) -> str | None:
        """Why the node at `place` (in the document at `base`) cannot be converted, if a `$ref`
        beneath it points nowhere or leads to one that does."""
        for where, ref in _refs_under(node, place):
            absolute = self.spec.join(base, ref)[0]
            if absolute in self.dangling:
                return f"$ref {ref!r} {self.dangling[absolute]} ({_dotted(where)})"
            if absolute in self.leads:
                return f"{self.leads[absolute]}, reached from {_dotted(where)})"
        return None

    def find(self, paths: Mapping[str, Any], base: str, problems: dict[tuple[str, str], str]) -> None:
        for path, written in paths.items():
            if not path.startswith("/"):
                continue
            place = ("paths", path)
            if _is_ref(written):  # what the path item's own $ref stands for is walked below
                absolute = self.spec.join(base, written["$ref"])[0]
                if absolute in self.dangling:
                    problems[(path, "")] = (
                        f"$ref {written['$ref']!r} {self.dangling[absolute]} ({_dotted(place)})"
                    )
                    continue
            try:
                item, item_base = self.spec.resolve(written, base)
            except SpecError:
                continue  # a loop of $refs: the checker names it
            if not isinstance(item, Mapping):
                continue
            for key, value in item.items():
                if key not in HTTP_METHODS and key not in PATH_ITEM_PARTS:  # read by no one
                    continue
                reason = self.reason(value, item_base, (*place, key))
                if reason is not None:
                    problems[(path, key if key in HTTP_METHODS else "")] = reason


class _Problem(Exception):
    """A structural problem, at its place: the spec's, or one operation's."""

    def __init__(self, place: Place, problem: str) -> None:
        super().__init__(f"{_dotted(place)}: {problem}")


class _Checker:
    """The structure the converter relies on, checked in document order: the document's own
    raises `SpecError`; a path item's or an operation's is kept in `problems`."""

    def __init__(self, spec: LoadedSpec, problems: dict[tuple[str, str], str]) -> None:
        self.spec = spec
        self.problems = problems

    def mapping(self, node: Any, base: str, place: Place) -> tuple[Mapping[str, Any], str]:
        if isinstance(node, dict) and "$ref" not in node:  # most are: nothing to follow
            return node, base
        try:
            node, base = self.spec.resolve(node, base)
        except SpecError as exc:
            raise _Problem(place, str(exc).removeprefix(f"spec {self.spec.location}: ")) from None
        if not isinstance(node, Mapping):
            raise _Problem(place, f"must be an object, not {_kind(node)}")
        return node, base

    def items(self, node: Any, place: Place) -> list[Any]:
        if not isinstance(node, list):
            raise _Problem(place, f"must be a list, not {_kind(node)}")
        return node

    def check_document(self) -> tuple[Mapping[str, Any], str]:
        """The document's own structure; its paths, and the URI of the document they stand in."""
        try:
            return self._document()
        except _Problem as problem:
            raise SpecError(f"spec {self.spec.location}: {problem}") from None

    def _document(self) -> tuple[Mapping[str, Any], str]:
        root, base = self.spec.document, self.spec.uri
        info = root.get("info")
        if info is None:
            raise _Problem(("info",), "required")
        info, _ = self.mapping(info, base, ("info",))
        if not isinstance(info.get("title"), str):
            raise _Problem(("info", "title"), "required (a string)")
        for index, server in enumerate(self.items(root.get("servers", []), ("servers",))):
            server, _ = self.mapping(server, base, ("servers", str(index)))
            if not isinstance(server.get("url"), str):
                raise _Problem(("servers", str(index), "url"), "required (a string)")
        self._security_schemes(root, base)
        if "paths" not in root:
            if self.spec.is_30:
                raise _Problem(("paths",), "required")
            return {}, base
        return self.mapping(root["paths"], base, ("paths",))

    def _security_schemes(self, root: Mapping[str, Any], base: str) -> None:
        components, _ = self.mapping(root.get("components", {}), base, ("components",))
        place = ("components", "securitySchemes")
        schemes, _ = self.mapping(components.get("securitySchemes", {}), base, place)
        for name, scheme in schemes.items():
            scheme, _ = self.mapping(scheme, base, (*place, name))
            kind = scheme.get("type")
            if not isinstance(kind, str):
                raise _Problem((*place, name, "type"), "required (a string)")
            if kind == "apiKey":
                for key in ("name", "in"):
                    if not isinstance(scheme.get(key), str):
                        raise _Problem((*place, name, key), "required (a string)")
            if kind == "http" and not isinstance(scheme.get("scheme"), str):
                raise _Problem((*place, name, "scheme"), "required (a string)")

    def check_paths(self, paths: Mapping[str, Any], base: str) -> None:
        for path, written in paths.items():
            if path.startswith("x-") or (path, "") in self.problems:  # an extension, not a path
                continue
            place = ("paths", path)
            try:
                if not path.startswith("/"):
                    raise _Problem(place, "a path must start with /")
                item, item_base = self.mapping(written, base, place)
                self.parameters(item.get("parameters", []), item_base, (*place, "parameters"))
            except _Problem as problem:
                self.problems[(path, "")] = str(problem)
                continue
            for method in HTTP_METHODS:
                if method in item and (path, method) not in self.problems:
                    try:
                        self.operation(item[method], item_base, (*place, method))
                    except _Problem as problem:
                        self.problems[(path, method)] = str(problem)

    def operation(self, operation: Any, base: str, place: Place) -> None:
        operation, base = self.mapping(operation, base, place)
        operation_id = operation.get("operationId")
        if operation_id is not None and not isinstance(operation_id, str):
            raise _Problem((*place, "operationId"), "must be a string")
        for index, tag in enumerate(self.items(operation.get("tags", []), (*place, "tags"))):
            if not isinstance(tag, str):
                raise _Problem((*place, "tags", str(index)), "must be a string")
        self.parameters(operation.get("parameters", []), base, (*place, "parameters"))
        if "requestBody" in operation:
            body, _ = self.mapping(operation["requestBody"], base, (*place, "requestBody"))
            if "content" not in body:
                raise _Problem((*place, "requestBody", "content"), "required")
            self.mapping(body["content"], base, (*place, "requestBody", "content"))
        if "responses" not in operation:
            if self.spec.is_30:
                raise _Problem((*place, "responses"), "required")
        else:
            responses, _ = self.mapping(operation["responses"], base, (*place, "responses"))
            for status, response in responses.items():
                self.mapping(response, base, (*place, "responses", str(status)))
        for index, requirement in enumerate(self.items(operation.get("security", []), (*place, "security"))):
            if not isinstance(requirement, Mapping):
                raise _Problem(
                    (*place, "security", str(index)), f"must be an object, not {_kind(requirement)}"
                )

    def parameters(self, parameters: Any, base: str, place: Place) -> None:
        for index, parameter in enumerate(self.items(parameters, place)):
            at = (*place, str(index))
            parameter, _ = self.mapping(parameter, base, at)
            if not isinstance(parameter.get("name"), str):
                raise _Problem((*at, "name"), "required (a string)")
            if parameter.get("in") not in PARAMETER_LOCATIONS:
                raise _Problem((*at, "in"), f"must be one of {', '.join(PARAMETER_LOCATIONS)}")


def _kind(node: Any) -> str:
    if isinstance(node, list):
        return "a list"
    if isinstance(node, str):
        return "a string"
    if node is None:
        return "null"
    return f"a {type(node).__name__}"

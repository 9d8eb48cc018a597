"""A loaded spec: its documents, and how a `$ref` in one of them is followed.

Every document read is registered, under its absolute URI, in a `referencing.Registry`, and every
`$ref` is resolved by `referencing` (JSON pointers into a document included); no reference is
followed here by hand. `referencing` is what `jsonschema` resolves with (so it is installed and
maintained with it), and it resolves JSON pointers and relative URIs exactly as JSON Schema does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urldefrag, urljoin

from referencing import Registry
from referencing.exceptions import Unresolvable

MAX_REF_CHAIN = 32  # a $ref to a $ref to …: more hops than this is a loop
HTTP_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
PARAMETER_LOCATIONS = ("path", "query", "header", "cookie")

Problems = Mapping[tuple[str, str], str]


class SpecError(Exception):
    """A spec cannot be used: the message names the file or URL and its first problem."""


@dataclass(frozen=True)
class LoadedSpec:
    """A spec and every document it refers to.

    `uri` is the root document's absolute URI (`file://…` for a file); `registry` holds every
    document read under its URI, and `unreadable` every document that could not be, with why.
    `problems` are the operations the converter must leave out, and why: under `(path, method)`
    (`method` in lower case), or `(path, "")` for every operation of a path item. `resolve`
    follows a node's `$ref` (and the `$ref`s it leads to) and says which document the result
    stands in, for the relative `$ref`s inside it.
    """

    location: str
    version: str
    document: Mapping[str, Any]
    files: tuple[str, ...]
    uri: str
    registry: Registry[Any]
    problems: Problems = field(default_factory=dict)
    unreadable: Mapping[str, str] = field(default_factory=dict)
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
        document, _, fragment = absolute.partition("#")
        try:
            found = self.registry.resolver(base_uri=document).lookup(f"#{fragment}").contents
        except Unresolvable:
            why = self.unreadable.get(document)
            raise SpecError(
                f"spec {self.location}: $ref {absolute} cannot be resolved{f' ({why})' if why else ''}"
            ) from None
        self._looked_up[absolute] = found
        return found

    def join(self, base: str, ref: str) -> tuple[str, str]:
        """The absolute form of `ref` written in the document at `base`, and its document's URI."""
        try:
            return self._joined[(base, ref)]
        except KeyError:
            pass
        if ref.startswith("#") and "#" not in base:  # most are: no URI to parse
            joined = (base + ref, base)
        else:
            absolute = urljoin(base, ref)
            joined = (absolute, urldefrag(absolute).url)
        self._joined[(base, ref)] = joined
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

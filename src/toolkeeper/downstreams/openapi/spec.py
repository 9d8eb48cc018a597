"""Loading an OpenAPI 3.0 or 3.1 document, with every document it refers to.

A spec is a file path or an http(s) URL, written in JSON or YAML. Large APIs publish theirs
split over many files and folders, joined by relative `$ref`s (`../schemas/pet.yaml`,
`common.yaml#/components/parameters/Limit`): `load_spec` reads the root document, then every
document a `$ref` names, relative to the document the `$ref` stands in, until none is left
(`documents.py`: where a document may come from, and what it may cost). Each is read as plain
JSON data, numbers as written and YAML aliases bounded (`parsing.py`), and registered in a
`referencing.Registry` that resolves every `$ref` (`loaded.py`).

The root must be an OpenAPI 3.0 or 3.1 document; anything else is refused with one line saying
what was found. Swagger 2.0 is refused rather than converted, with the command that converts it
(`npx swagger2openapi`): every spec of APIs.guru's directory is already OpenAPI 3, a converter
maintained for that alone does it better than a second reader here would, and a person then
serves the result they can read.

The structure is checked where the converter relies on it (`checks.py`): a problem of the
document itself refuses the spec with one line naming its place; a problem inside one operation,
a `$ref` to nowhere beneath it included, leaves out that operation alone, with its reason in
`LoadedSpec.problems`.

Nothing here raises anything but `SpecError` for a spec, whatever its documents hold: a loop of
`$ref`s across files is read once per file and followed a bounded number of hops, a document
larger than the entry's `maxSpecBytes` is not read whole, and an alias bomb is refused before
it is expanded.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from referencing import Registry, Resource

from toolkeeper.config.openapi import SpecLimits, foreign_spec_location, is_web_url
from toolkeeper.downstreams.openapi.checks import find_problems
from toolkeeper.downstreams.openapi.documents import DocumentReader, Documents
from toolkeeper.downstreams.openapi.loaded import (
    HTTP_METHODS,
    MAX_REF_CHAIN,
    PARAMETER_LOCATIONS,
    LoadedSpec,
    SpecError,
)
from toolkeeper.downstreams.openapi.parsing import RefusedDocument, UnreadableDocument

__all__ = [
    "HTTP_METHODS",
    "MAX_REF_CHAIN",
    "PARAMETER_LOCATIONS",
    "LoadedSpec",
    "SpecError",
    "load_spec",
]

SUPPORTED_VERSIONS = ("3.0.", "3.1.")


def load_spec(location: str, *, timeout: float = 30.0, limits: SpecLimits | None = None) -> LoadedSpec:
    """Read the spec at `location` (a file path or an http(s) URL) and every document its
    `$ref`s name, within `limits` (the entry's; safe defaults without); check what the converter
    relies on. Raises `SpecError`."""
    if foreign_spec_location(location):
        raise SpecError(f"spec {location}: a spec is a file path or an http:// or https:// URL")
    is_url = is_web_url(location)
    shown = location if is_url else str(Path(location).expanduser().resolve())
    root_uri = location if is_url else Path(shown).as_uri()
    try:
        with DocumentReader(root_uri, limits=limits or SpecLimits(), timeout=timeout) as reader:
            documents = reader.read_all()
    except (RefusedDocument, UnreadableDocument) as exc:
        raise SpecError(f"spec {shown}: {exc}") from None
    root_uri = next(iter(documents.read))
    root = documents.read[root_uri].contents
    spec = LoadedSpec(
        location=shown,
        version=_version(root, shown),
        document=root,
        files=tuple(documents.files),
        uri=root_uri,
        registry=_registry(documents),
        unreadable=documents.unreadable,
    )
    return dataclasses.replace(spec, problems=find_problems(spec, documents))


def _registry(documents: Documents) -> Registry[Any]:
    return Registry().with_resources(
        (uri, Resource.opaque(document.contents)) for uri, document in documents.read.items()
    )


def _version(root: Any, shown: str) -> str:
    """The root's OpenAPI version; anything but an OpenAPI 3.0 or 3.1 document is refused."""
    if not isinstance(root, Mapping):
        raise SpecError(f"spec {shown}: not an OpenAPI document: it holds {_found(root)}, not an object")
    if "swagger" in root and "openapi" not in root:
        raise SpecError(
            f"spec {shown}: swagger: this is a Swagger {root['swagger']} document, and toolkeeper reads "
            f"OpenAPI 3.0 and 3.1; convert it first (npx swagger2openapi {shown} -o openapi.json) and "
            "serve the result"
        )
    version = root.get("openapi")
    if version is None:
        if "paths" in root or "info" in root:
            raise SpecError(f"spec {shown}: openapi: required")
        keys = ", ".join(str(key) for key in list(root)[:5]) or "nothing"
        raise SpecError(
            f"spec {shown}: not an OpenAPI document: an object of {keys}, without 'openapi' or 'swagger'"
        )
    if not isinstance(version, str) or not version.startswith(SUPPORTED_VERSIONS):
        raise SpecError(f"spec {shown}: openapi: version {version!r} is not supported (3.0.x or 3.1.x)")
    return version


def _found(node: Any) -> str:
    if isinstance(node, list):
        return f"a list of {len(node)}"
    if isinstance(node, str):
        return f"the text {node[:40]!r}"
    return "nothing" if node is None else f"the {type(node).__name__} {node!r}"

"""Reading a spec's documents: the root, then every document a `$ref` names, each once.

Where a document may come from:
- a local spec reads files in its own folder and below: a `$ref` to `../../../etc/passwd`, or
  to an absolute path elsewhere, is refused (symbolic links are followed before the check);
- a document from the network never makes toolkeeper read a local file;
- a document from the network refers only to its own origin (scheme, host, port), the spec's,
  and those of the entry's `allowRefOrigins` (`*`: any); a local spec's files may refer to any;
- no document is fetched from a loopback, private or link-local address unless the person
  configured its origin (`addresses.py`);
- redirects are followed (up to 5) only within the origin of the URL fetched; relative `$ref`s
  resolve against the URL asked for, not the one redirected to;
- only regular files are read, so a FIFO or a device never holds loading up.

What a document may cost: `maxSpecBytes` bounds every document of a spec together, checked
before a file is read (its size) and while a response arrives (its Content-Length, then what
has arrived), so a 400 MB document is refused having read at most that much of it; each fetch
has `timeout` seconds in all, however slowly its bytes come.

A document that cannot be read (missing, HTTP 404, not JSON or YAML) fails only what refers to
it: it is kept in `Documents.unreadable` with why. One that must not be read (the rules above,
too large, an alias bomb) refuses the whole spec (`RefusedDocument`).
"""

from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urldefrag, urljoin, urlsplit
from urllib.request import url2pathname

from toolkeeper.config.openapi import ANY_ORIGIN, SpecLimits, origin_of
from toolkeeper.downstreams.openapi.addresses import internal_host_refusal
from toolkeeper.downstreams.openapi.parsing import Document, RefusedDocument, UnreadableDocument, parse

MAX_REDIRECTS = 5


@dataclass
class Documents:
    """Every document reachable from the root by `$ref`s, by absolute URI; those that could not
    be read, with why; and the local files tried (the source watches them)."""

    read: dict[str, Document] = field(default_factory=dict)
    unreadable: dict[str, str] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)


def path_of(uri: str) -> str:
    return url2pathname(unquote(urlsplit(uri).path))


def shown_uri(uri: str) -> str:
    return path_of(uri) if uri.startswith("file:") else uri


class DocumentReader:
    """Reads a spec's documents (files, or URLs with one HTTP client) by the rules above."""

    def __init__(self, root_uri: str, *, limits: SpecLimits, timeout: float) -> None:
        self.root_uri = root_uri
        self.limits = limits
        self.timeout = timeout
        self.budget = limits.max_bytes  # bytes the documents not read yet may still take
        on_network = not root_uri.startswith("file:")
        self.folder = None if on_network else Path(path_of(root_uri)).parent
        self.root_origin = origin_of(root_uri) if on_network else None
        self.trusted_origins = {self.root_origin, *limits.ref_origins} - {None, ANY_ORIGIN}
        self._client: Any = None
        self._refused_origins: dict[str | None, str | None] = {}

    def __enter__(self) -> DocumentReader:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._client is not None:
            self._client.close()

    def read_all(self) -> Documents:
        """Raises `RefusedDocument`, or `UnreadableDocument` for the root."""
        documents = Documents()
        waiting: list[tuple[str, str | None]] = [(urldefrag(self.root_uri).url, None)]
        while waiting:
            uri, referrer = waiting.pop()
            if uri in documents.read or uri in documents.unreadable:
                continue
            if uri.startswith("file:"):
                documents.files.append(path_of(uri))
            try:
                document = documents.read[uri] = self.read(uri, referrer=referrer)
            except UnreadableDocument as exc:
                if referrer is None:
                    raise
                documents.unreadable[uri] = str(exc)
                continue
            for ref in document.refs:
                if ref.startswith("#"):
                    continue
                target = urldefrag(urljoin(uri, ref)).url
                if target not in documents.read and target not in documents.unreadable:
                    waiting.append((target, uri))
        return documents

    def read(self, uri: str, *, referrer: str | None) -> Document:
        scheme = urlsplit(uri).scheme.lower()
        where = "" if referrer is None else f" (referred to from {shown_uri(referrer)})"
        if scheme == "file":
            self._permit_file(uri, referrer)
            data = self._read_file(path_of(uri), where)
        elif scheme in ("http", "https"):
            self._permit_url(uri, referrer)
            data = self._fetch(uri, where)
        else:
            raise UnreadableDocument(f"cannot read {uri}{where}: only files and http(s) URLs are read")
        self.budget -= len(data)
        return parse(
            data,
            name="the document" if referrer is None else shown_uri(uri),
            json_hint=uri.endswith(".json"),
            max_aliases=self.limits.max_aliases,
            max_chars=self.budget,
        )

    # -- where a document may come from ------------------------------------------------------------
    def _permit_file(self, uri: str, referrer: str | None) -> None:
        if referrer is None:
            return
        path = path_of(uri)
        if not referrer.startswith("file:"):
            raise RefusedDocument(
                f"{shown_uri(referrer)} refers to the local file {path}: "
                "a spec from the network may refer only to http(s) documents"
            )
        if self.folder is not None and not Path(path).resolve().is_relative_to(self.folder):
            raise RefusedDocument(
                f"{shown_uri(referrer)} refers to {path}, outside the spec's folder {self.folder}: "
                "a spec may refer only to files in its own folder and below"
            )

    def _permit_url(self, uri: str, referrer: str | None) -> None:
        if referrer is None:
            return  # the spec's own URL: the person configured it
        origin = origin_of(uri)
        if not referrer.startswith("file:"):
            allowed = {origin_of(referrer), self.root_origin, *self.limits.ref_origins}
            if origin is None or (origin not in allowed and ANY_ORIGIN not in allowed):
                raise RefusedDocument(
                    f"{referrer} refers to {uri}, on another origin than its own: a spec from the "
                    f"network may refer only to its own origin; add {origin or uri!r} to 'allowRefOrigins' "
                    "in the server entry if you trust it"
                )
        if origin not in self._refused_origins:
            self._refused_origins[origin] = internal_host_refusal(uri, trusted_origins=self.trusted_origins)
        refusal = self._refused_origins[origin]
        if refusal is not None:
            raise RefusedDocument(
                f"{shown_uri(referrer)} refers to {uri}, inside your network ({refusal}): add its origin "
                "to 'allowRefOrigins' in the server entry if you trust it"
            )

    # -- reading, bounded --------------------------------------------------------------------------
    def _too_large(self, name: str) -> RefusedDocument:
        together = "" if self.budget == self.limits.max_bytes else ", with the documents read before it"
        return RefusedDocument(
            f"{name} is larger than 'maxSpecBytes' ({self.limits.max_bytes:,} bytes{together}); "
            "raise 'maxSpecBytes' in the server entry if the spec is meant to be this large"
        )

    def _read_file(self, path: str, where: str) -> bytes:
        try:
            # Not blocking: a FIFO opens at once, and is refused below as not a regular file.
            descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        except OSError as exc:
            raise UnreadableDocument(
                f"cannot read {path}{where}: {exc.strerror or type(exc).__name__}"
            ) from None
        with os.fdopen(descriptor, "rb") as file:
            status = os.fstat(file.fileno())
            if not stat.S_ISREG(status.st_mode):
                kind = "a folder" if stat.S_ISDIR(status.st_mode) else "not a regular file"
                raise UnreadableDocument(f"cannot read {path}{where}: it is {kind}")
            if status.st_size > self.budget:
                raise self._too_large(f"{path}{where}")
            data = file.read(self.budget + 1)
        if len(data) > self.budget:
            raise self._too_large(f"{path}{where}")
        return data

    def _fetch(self, uri: str, where: str) -> bytes:
        import httpx2  # only a spec on the network needs an HTTP client

        if self._client is None:
            self._client = httpx2.Client(timeout=self.timeout, follow_redirects=False)
        deadline = time.monotonic() + self.timeout
        url = uri
        try:
            for _ in range(MAX_REDIRECTS + 1):
                with self._client.stream("GET", url) as response:
                    if response.is_redirect:
                        url = self._redirected(uri, url, response.headers.get("location", ""), where)
                        continue
                    if response.status_code != 200:
                        raise UnreadableDocument(
                            f"cannot fetch {uri}{where}: HTTP {response.status_code} {response.reason_phrase}"
                        )
                    return self._body(response, uri, where, deadline)
        except httpx2.HTTPError as exc:
            reason = str(exc) or type(exc).__name__
            raise UnreadableDocument(f"cannot fetch {uri}{where}: {reason}") from None
        raise UnreadableDocument(f"cannot fetch {uri}{where}: more than {MAX_REDIRECTS} redirects")

    def _redirected(self, uri: str, url: str, location: str, where: str) -> str:
        target = urljoin(url, location)
        if origin_of(target) != origin_of(uri):
            raise RefusedDocument(
                f"{uri}{where} redirects to {target}, another origin: redirects are followed only within "
                "the origin fetched"
            )
        return target

    def _body(self, response: Any, uri: str, where: str, deadline: float) -> bytes:
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.budget:
            raise self._too_large(f"{uri}{where}")
        chunks: list[bytes] = []
        size = 0
        for chunk in response.iter_bytes():  # decompressed: a gzip bomb is counted as it unpacks
            size += len(chunk)
            if size > self.budget:
                raise self._too_large(f"{uri}{where}")
            if time.monotonic() > deadline:
                raise UnreadableDocument(f"cannot fetch {uri}{where}: it took longer than {self.timeout:g} s")
            chunks.append(chunk)
        return b"".join(chunks)

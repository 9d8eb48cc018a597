"""One document's bytes as plain JSON data, and the `$ref`s it holds.

- JSON is read by orjson, except a document holding an integer of 19 digits or more: orjson reads
  one past 64 bits as a float (18446744073709551617 becomes 1.8446744073709552e+19), so such a
  document is read by the standard `json` module, which keeps every integer as written. JSON
  has no limit on numbers, and neither has a spec here; only an integer of more than 4,300
  digits is refused (Python's own guard: reading one costs time quadratic in its length).
- YAML is read by PyYAML's libyaml-backed safe loader (the pure-Python one where libyaml is
  missing): only plain data, never Python objects, a tenth of the pure loader's time. Dates stay
  strings (JSON has no dates). What it reads becomes plain JSON data by a round trip through
  JSON text (orjson, or `json` for integers past 64 bits), so a number used as a key (`200:`
  under `responses`) becomes the string JSON would have.
- YAML aliases (`*name`) are bounded. The loader shares an aliased node, but whatever copies the
  data out (the round trip above, a tool's schema, a client's `tools/list`) expands each: a
  592-byte document of nested aliases stands for a billion nodes. So, before a node is built,
  the composed graph is measured with each alias counted as all it stands for: a document whose
  aliases add more than `max_aliases` nodes, or more characters than the bytes it may still
  take, is refused, as is an alias inside the node it names (a loop).
- A document that starts with `<` is an HTML or XML page, named as such rather than as bad YAML.

The `$ref`s are found in the JSON text by one regular expression (a string value of a `"$ref"`
key), each distinct one decoded once.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any, ClassVar

import orjson
import yaml

# The string unrolled (runs of plain characters between escapes): a third of the alternation's time.
_REF = re.compile(rb'"\$ref"\s*:\s*("[^"\\]*(?:\\.[^"\\]*)*")')
_LEADING_SPACE = re.compile(rb"\s*")
# Every digit to "0": then a long integer is a run of zeros, found by a plain byte search.
_DIGITS_AS_ZERO = bytes(ord("0") if chr(b).isdigit() and b < 128 else b for b in range(256))
_LONG_NUMBER = b"0" * 19  # orjson keeps integers exactly up to 18446744073709551615 (20 digits)
_LONG_INTEGER_VALUE = re.compile(rb"[:\[,]\s*-?[0-9]{19}")
_UTF8_BOM = b"\xef\xbb\xbf"


class UnreadableDocument(Exception):
    """A document that cannot be read as data (not JSON or YAML, not found, not fetched): only
    what refers to it fails. The message is the reason, without the spec's name."""


class RefusedDocument(Exception):
    """A document that must not be read at all (too large, an alias bomb, where a spec may not
    point): the whole spec is refused. The message is the reason, without the spec's name."""


class Document:
    """A document read: its contents as JSON data, and the distinct `$ref` strings it holds."""

    __slots__ = ("contents", "refs")

    def __init__(self, contents: Any, refs: tuple[str, ...]) -> None:
        self.contents = contents
        self.refs = refs


def parse(data: bytes, *, name: str, json_hint: bool, max_aliases: int, max_chars: int) -> Document:
    """`data` (JSON, or YAML unless `json_hint` or its first character says JSON) as a document.
    `name` is what a message calls it; `max_chars` is what its aliases may add, in characters."""
    data = data.removeprefix(_UTF8_BOM)
    first = data[_LEADING_SPACE.match(data).end() :][:1]  # type: ignore[union-attr]
    if first == b"<":
        start = data.lstrip()[:40].decode("utf-8", "replace").split("\n")[0]
        raise UnreadableDocument(f"{name} is an HTML or XML page, not JSON or YAML (it starts {start!r})")
    if first in (b"{", b"[") or json_hint:
        contents, text = _json(data, name), data
    else:
        contents, text = _yaml(data, name, max_aliases=max_aliases, max_chars=max_chars)
    raw = set(_REF.findall(text))
    refs = {orjson.loads(match) for match in raw}
    return Document(contents, tuple(sorted(ref for ref in refs if isinstance(ref, str))))


def _json(data: bytes, name: str) -> Any:
    if not _has_long_integer(data):
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            # What orjson refuses and `json` reads (1e400) is read; a real error is orjson's.
            try:
                return _json_module(data, name)
            except UnreadableDocument:
                raise UnreadableDocument(
                    f"{name} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
                ) from None
    return _json_module(data, name)


def _has_long_integer(data: bytes) -> bool:
    """Whether `data` may hold an integer of 19 digits or more: a quick byte search for a run of
    digits, then (only if one is found, as in a long ID inside a string) a search for one where
    a JSON value starts."""
    if data.translate(_DIGITS_AS_ZERO).find(_LONG_NUMBER) < 0:
        return False
    return _LONG_INTEGER_VALUE.search(data) is not None


def _json_module(data: bytes, name: str) -> Any:
    try:
        return json.loads(data)
    except json.JSONDecodeError as exc:
        raise UnreadableDocument(
            f"{name} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None
    except UnicodeDecodeError as exc:
        raise UnreadableDocument(
            f"{name} is not valid UTF-8 text ({exc.reason} at byte {exc.start})"
        ) from None
    except ValueError as exc:  # an integer past Python's 4,300 digits
        raise UnreadableDocument(f"{name} holds a number too long to read ({_first_line(exc)})") from None
    except RecursionError:
        raise UnreadableDocument(f"{name} is nested too deeply to read") from None


def _yaml(data: bytes, name: str, *, max_aliases: int, max_chars: int) -> tuple[Any, bytes]:
    loader = _Loader(data)
    loader.max_aliases = max_aliases
    loader.max_chars = max_chars
    loader.measured = b"&" in data  # no anchor, no alias: nothing to measure
    loader.name = name
    try:
        loaded = loader.get_single_data()  # a safe loader: plain data only
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise UnreadableDocument(f"{name} is not valid YAML ({at}{problem})") from None
    except ValueError as exc:  # an integer past Python's 4,300 digits
        raise UnreadableDocument(f"{name} holds a number too long to read ({_first_line(exc)})") from None
    except RecursionError:
        raise UnreadableDocument(f"{name} is nested too deeply to read") from None
    finally:
        loader.dispose()
    return _as_json(loaded, name)


def _as_json(loaded: Any, name: str) -> tuple[Any, bytes]:
    """What YAML read, as JSON data and JSON text."""
    try:
        text = orjson.dumps(loaded, option=orjson.OPT_NON_STR_KEYS)
    except orjson.JSONEncodeError:
        pass  # an integer past 64 bits, or nesting past orjson's 255 levels: `json` has neither limit
    else:
        return orjson.loads(text), text
    try:
        wide = json.dumps(loaded)
    except (TypeError, ValueError) as exc:
        raise UnreadableDocument(f"{name} holds what JSON cannot ({exc})") from None
    except RecursionError:
        raise UnreadableDocument(f"{name} is nested too deeply to read") from None
    return json.loads(wide), wide.encode()


def _first_line(exc: BaseException) -> str:
    return str(exc).split(";")[0].split("\n")[0]


_BaseLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_BaseLoader):  # type: ignore[misc]
    """The safe loader without YAML 1.1 timestamps (a date in an example stays a string), whose
    aliases are measured before anything is built."""

    yaml_implicit_resolvers: ClassVar[dict[Any, Any]] = {
        first: [(tag, pattern) for tag, pattern in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for first, resolvers in _BaseLoader.yaml_implicit_resolvers.items()
    }
    max_aliases = 0
    max_chars = 0
    measured = True
    name = "the document"

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

    def get_single_node(self) -> Any:
        node = super().get_single_node()
        if node is not None and self.measured:
            added_nodes, added_chars = _alias_expansion(node, self.name)
            if added_nodes > self.max_aliases:
                raise RefusedDocument(
                    f"YAML aliases (*name) in {self.name} expand to more than {self.max_aliases:,} further "
                    "nodes (an alias bomb?); raise 'maxAliases' in the server entry if it is meant to be "
                    "this large"
                )
            if added_chars > self.max_chars:
                raise RefusedDocument(
                    f"YAML aliases (*name) in {self.name} expand it past 'maxSpecBytes' (an alias bomb?); "
                    "raise 'maxSpecBytes' in the server entry if it is meant to be this large"
                )
        return node


def _alias_expansion(root: Any, name: str) -> tuple[int, int]:
    """How many nodes, and characters of scalars, the aliases under `root` add when each is
    expanded: its size as a tree less its size as written. Each node is measured once."""
    sizes: dict[int, tuple[int, int]] = {}  # a node's id: its nodes and characters as a tree
    entered: set[int] = set()  # collections being measured: the path from the root
    written_nodes = written_chars = 0
    waiting: list[tuple[Any, bool]] = [(root, False)]
    while waiting:
        node, children_measured = waiting.pop()
        key = id(node)
        if children_measured:
            entered.discard(key)
            nodes, chars = 1, 0
            for child in _children(node):
                child_nodes, child_chars = sizes[id(child)]
                nodes, chars = nodes + child_nodes, chars + child_chars
            sizes[key] = (nodes, chars)
            continue
        if key in sizes:
            continue
        if key in entered:
            raise RefusedDocument(f"a YAML alias (*name) in {name} stands inside the node it names: a loop")
        written_nodes += 1
        if isinstance(node, yaml.ScalarNode):
            sizes[key] = (1, len(node.value))
            written_chars += len(node.value)
            continue
        entered.add(key)
        waiting.append((node, True))
        waiting.extend((child, False) for child in _children(node) if id(child) not in sizes)
    nodes, chars = sizes[id(root)]
    return nodes - written_nodes, chars - written_chars


def _children(node: Any) -> Iterator[Any]:
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            yield key
            yield value
    elif isinstance(node, yaml.SequenceNode):
        yield from node.value

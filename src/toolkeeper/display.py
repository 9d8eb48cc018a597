"""Text from outside toolkeeper, shown to a person.

A client's name, a server's tool names, titles and errors, the arguments a model chose: every
face (the CLI's tables and lines, `approvals watch`, the question a client's user reads, the
dashboard) shows such text through `visible` or `visible_line`, so nothing in it acts on the
terminal or on the reader's eye instead of being read. Written as an escape (`\\u001b`, or
`\\U000e0041` beyond the first plane) is every character of these Unicode categories:

- controls (Cc): the C0 controls, among them ESC, which starts the terminal's escape sequences,
  and backspace and carriage return, which move the cursor back over what was written; DEL; the
  C1 controls (U+0080-U+009F; U+009B alone is a control sequence introducer);
- format characters (Cf): the bidirectional marks, embeddings, overrides and isolates (U+061C,
  U+200E, U+200F, U+202A-U+202E, U+2066-U+2069), which reorder what is shown; the zero-width
  space, joiners and word joiner (U+200B-U+200D, U+2060, U+FEFF), which hide where a word
  ends; the soft hyphen; the tag characters (U+E0000-U+E007F), which carry text nobody sees;
- line and paragraph separators (Zl, Zp: U+2028, U+2029), which some terminals and clients
  break lines at;
- surrogates (Cs), which no terminal can be sent.

Newline and tab stay where text may have lines of its own (a table cell, an error's detail);
`visible_line` writes them as `\\n` and `\\t` too (and carriage return as `\\r`), for text
that must stay on its line: a newline in an argument's name must not make a line that looks
like one toolkeeper wrote. Letters, marks, spaces, symbols and private-use characters are
shown as they are (a joiner between emoji is escaped too: the person sees what is there).

Markup is the faces' own concern: no face parses text from outside as markup (Rich's
`[bold]`); this module knows nothing of Rich.
"""

from __future__ import annotations

import re
import unicodedata

# The categories written as escapes (see the module's docstring).
ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})
SHORT_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}
KEPT_IN_LINES = frozenset("\n\t")  # what `visible` leaves for text that may have lines


def escape(char: str) -> str:
    """One character as the escape a person reads: `\\n`, `\\u001b`, `\\U000e0041`."""
    if char in SHORT_ESCAPES:
        return SHORT_ESCAPES[char]
    code = ord(char)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def acts(char: str) -> bool:
    """Whether the character would act on the terminal or the reading instead of being read."""
    return unicodedata.category(char) in ESCAPED_CATEGORIES


def _visible(text: str, kept: frozenset[str]) -> str:
    # Most text has nothing to escape: `isprintable` says so at C speed (it is false for every
    # escaped category, and for a few harmless ones such as a no-break space).
    if text.isprintable():
        return text
    return "".join(escape(char) if char not in kept and acts(char) else char for char in text)


def visible(text: str) -> str:
    """`text` with every character that would act on the terminal written as its escape;
    newlines and tabs kept."""
    return _visible(text, KEPT_IN_LINES)


def visible_line(text: str, limit: int | None = None) -> str:
    """`text` on one line: as `visible`, newlines and tabs escaped too. Beyond `limit` characters
    shown (escapes counted as shown) it is cut, with a mark saying how many more there were."""
    if text.isprintable():
        return text if limit is None or len(text) <= limit else text[:limit] + more(len(text) - limit)
    if limit is None:
        return _visible(text, frozenset())
    shown: list[str] = []
    size = 0
    for index, char in enumerate(text):
        piece = escape(char) if acts(char) else char
        if size + len(piece) > limit:
            return "".join(shown) + more(len(text) - index)
        shown.append(piece)
        size += len(piece)
    return "".join(shown)


def more(count: int) -> str:
    """The mark of a cut: how many characters are not shown."""
    return f"… ({count:,} more {'character' if count == 1 else 'characters'})"


def cut(text: str, limit: int) -> str:
    """`text` at most `limit` characters long, the mark of the cut included (for a `limit` longer
    than the mark); its head kept."""
    if len(text) <= limit:
        return text
    kept = max(limit - len(more(len(text))), 0)
    return text[:kept] + more(len(text) - kept)


# Of a tool's description, the most one line carries (a description may be megabytes): a table's
# row, a search's match. The tool's own page shows it whole.
LINE_MAX = 240
# Where a line ends, as `str.splitlines` sees it.
LINE_BREAK = re.compile("[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]")


def first_line(text: str, limit: int = LINE_MAX) -> str:
    """A description as a row shows it: its first line, at most `limit` characters, ending in
    `…` when anything was left out."""
    head = text.lstrip()[:limit]
    line = LINE_BREAK.split(head, maxsplit=1)[0].rstrip()
    return line if len(line) == len(text.strip()) else line + "…"

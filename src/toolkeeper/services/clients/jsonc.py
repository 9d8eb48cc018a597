"""JSON with comments and trailing commas (VS Code's and Cursor's files), read as JSON."""

from __future__ import annotations


def strip_jsonc(text: str) -> str:
    """JSON from JSONC: `//` and `/* */` comments and trailing commas removed, strings untouched.
    Removed text becomes spaces (newlines stay), so a JSON error still points at the right line."""
    result: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == '"':
            end = i + 1
            while end < n and text[end] != '"':
                end += 2 if text[end] == "\\" else 1
            result.append(text[i : end + 1])
            i = end + 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end == -1 else end
            result.append(" " * (end - i))
            i = end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end == -1 else end + 2
            result.append("".join(c if c == "\n" else " " for c in text[i:end]))
            i = end
        elif ch == ",":
            result.append("," if _more_follows(text, i + 1) else " ")
            i += 1
        else:
            result.append(ch)
            i += 1
    return "".join(result)


def _more_follows(text: str, following: int) -> bool:
    """Whether a comma is followed (past blanks and comments) by more than a closing bracket."""
    n = len(text)
    while following < n:
        if text[following] in " \t\r\n":
            following += 1
        elif text.startswith("//", following):
            newline = text.find("\n", following)
            following = n if newline == -1 else newline
        elif text.startswith("/*", following):
            close = text.find("*/", following + 2)
            following = n if close == -1 else close + 2
        else:
            break
    return not (following < n and text[following] in "]}")

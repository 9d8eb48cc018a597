"""What binds an approval to one exact call: canonical arguments and their digest.

The same canonical form feeds the audit log's argument digest, so a record and an approval of
the same call carry the same arguments hash.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

# Made once: json.dumps with options builds a new encoder on every call, which cost more than
# the encoding of a call's arguments.
_CANONICAL_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_json(value: Any) -> bytes:
    """One spelling per JSON value: sorted keys, no spaces, UTF-8 (so equal arguments hash equal
    however the client ordered or spaced them). A lone surrogate, which JSON can carry but UTF-8
    cannot, keeps its code point (surrogatepass) instead of failing the call."""
    return _CANONICAL_ENCODER.encode(value).encode("utf-8", "surrogatepass")


def arguments_digest(arguments: Any) -> str:
    """SHA-256 (hex) of the canonical arguments."""
    return hashlib.sha256(canonical_json(arguments if arguments is not None else {})).hexdigest()


def call_hash(server: str, tool: str, arguments: Any, ref_id: str) -> str:
    """SHA-256 (hex) of server, tool, canonical arguments and the tool's refId: an approval
    holds for this call of this definition of the tool, nothing else."""
    return hashlib.sha256(canonical_json([server, tool, arguments or {}, ref_id])).hexdigest()

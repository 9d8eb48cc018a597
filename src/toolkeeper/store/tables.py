"""The store's tables. Changing them means adding a migration in `migrations/versions/`."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    false,
)

metadata = MetaData()

toolsets = Table(
    "toolsets",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(50), nullable=False, unique=True),
    Column("description", Text, nullable=False, default=""),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    # True when a person made it (the CLI); False when the model did, through the configuration
    # tools. A toolset a person made keeps its own confirm modes; in any other, a mode set for a
    # tool in another toolset follows the tool (see policy/decide.py).
    Column("made_by_person", Boolean, nullable=False, server_default=false()),
    # "search" or "off": whether clients that see it also get `find-tools` (see runtime/views.py).
    Column("discovery", String(10), nullable=False, server_default="off"),
)

# A toolset's tools, in the order the person gave them. A reference keeps both identities:
# the name survives a schema change, the refId notices it.
toolset_tools = Table(
    "toolset_tools",
    metadata,
    Column("toolset_id", Integer, ForeignKey("toolsets.id", ondelete="CASCADE"), primary_key=True),
    Column("position", Integer, primary_key=True),
    Column("namespaced_name", String(200), nullable=True),
    Column("ref_id", String(64), nullable=True),
)

# One row per note, so two writers adding notes to one tool never overwrite each other.
# `tool_key` is the namespacedName (or the refId when only that is known): a note name is
# unique per tool within a toolset, and the database enforces it.
tool_notes = Table(
    "tool_notes",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("toolset_id", Integer, ForeignKey("toolsets.id", ondelete="CASCADE"), nullable=False),
    Column("tool_key", String(200), nullable=False),
    Column("namespaced_name", String(200), nullable=True),
    Column("ref_id", String(64), nullable=True),
    Column("name", String(50), nullable=False),
    Column("note", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    UniqueConstraint("toolset_id", "tool_key", "name", name="uq_tool_notes_name"),
)

# What a person pinned for a tool: one row per field, so setting one hint never overwrites
# another set at the same moment. `scope` is '' for a global pin or the toolset's name for a pin
# that holds while that toolset is equipped. `field` is a hint name, 'title', or 'param:<name>'
# for a parameter description; `value` is JSON (true, false or a string).
tool_overrides = Table(
    "tool_overrides",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("namespaced_name", String(200), nullable=False),
    Column("scope", String(50), nullable=False),
    Column("field", String(200), nullable=False),
    Column("value", Text, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    UniqueConstraint("scope", "namespaced_name", "field", name="uq_tool_overrides_field"),
)

# The person's argument rules, one row per rule; a tool's rules apply in `id` order (the order
# they were added), so two writers adding rules at once never collide.
argument_rules = Table(
    "argument_rules",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("namespaced_name", String(200), nullable=False, index=True),
    Column("rule", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
)

# How a person wants a tool's calls confirmed: `mode` is always, session, never or deny, with an
# optional text shown when the person is asked. `namespaced_name` is '*' for the default of a
# whole toolset; `scope` is '' (global) or a toolset's name, like pins.
confirm_modes = Table(
    "confirm_modes",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("namespaced_name", String(200), nullable=False),
    Column("scope", String(50), nullable=False),
    Column("mode", String(20), nullable=False),
    Column("text", Text, nullable=True),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    UniqueConstraint("scope", "namespaced_name", name="uq_confirm_modes_tool"),
)

# Approval rules, first match wins in `id` order. `scope` is '' for a rule that always holds,
# or 'session:<id>' for one a person gave "for this session". `rule` is the rule's JSON.
# `holder` is JSON naming the gateway process whose client session a session rule belongs to
# (host, pid, boot): it holds in that process only and goes when the process stops.
approval_rules = Table(
    "approval_rules",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("scope", String(200), nullable=False),
    Column("rule", Text, nullable=False),
    Column("origin", String(200), nullable=False),  # who made it: "cli", "person via elicitation", …
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("holder", Text, nullable=True),
)

# Calls waiting for a person's answer, and what became of them. The gateway that holds the call
# writes the row and watches it; the CLI or the dashboard writes the answer, who gave it and through
# which channel. `arguments` is shown to the person while the call waits and cleared once it is decided.
pending_approvals = Table(
    "pending_approvals",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False),
    # pending, approved, denied, expired, not_run, store_restored; approved_late, run_on_retry
    Column("status", String(20), nullable=False, index=True),
    Column("client", Text, nullable=False),  # JSON: name, version, session
    Column("exposed_name", String(200), nullable=False),
    Column("namespaced_name", String(200), nullable=False),
    Column("ref_id", String(64), nullable=False),
    Column("call_hash", String(64), nullable=False),
    Column("arguments", Text, nullable=True),
    Column("question", Text, nullable=False),  # JSON: summary sentence, warnings, reason, text
    Column("answer", String(20), nullable=True),  # once, session, always
    Column("reason", Text, nullable=True),
    Column("decided_by", String(200), nullable=True),  # as people read it: "person via cli"
    Column("decided_at", DateTime(timezone=True), nullable=True),
    Column("channel", String(50), nullable=True),  # the face the person answered with: cli, dashboard
    Column("principal", String(200), nullable=True),  # who the gateway let in: a key's name, "local", …
    # The replica (`settings.replica`) that ran the call once it was approved: one, by a
    # conditional update; None while nobody ran it.
    Column("ran_by", String(63), nullable=True),
)

# The nonces of 2026-07-28 request states already answered, until they expire: a state holds
# once on whichever replica its retry reaches (see relay/seal.py).
spent_request_states = Table(
    "spent_request_states",
    metadata,
    Column("nonce", String(32), primary_key=True),
    Column("expires_at", DateTime(timezone=True), nullable=False, index=True),
)

# The kinds of audit record (`audit_log.kind`).
AUDIT_CALL, AUDIT_GAP, AUDIT_ANCHOR = "call", "gap", "anchor"

# One record per tools/call, written in batches off the call path.
audit_log = Table(
    "audit_log",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("at", DateTime(timezone=True), nullable=False, index=True),
    Column("client_name", String(200), nullable=True),
    Column("client_version", String(100), nullable=True),
    Column("client_session", String(200), nullable=True),
    Column("exposed_name", String(200), nullable=False),
    Column("server", String(100), nullable=True, index=True),
    Column("tool", String(200), nullable=True, index=True),
    Column("ref_id", String(64), nullable=True),
    Column("arguments_sha256", String(64), nullable=False),
    Column("arguments", Text, nullable=True),
    Column("hints", Text, nullable=True),  # JSON: {hint: {"value": …, "source": …}}
    Column("decision", String(10), nullable=False, index=True),  # allow, ask, deny
    Column("decided_by", String(200), nullable=True),
    Column("channel", String(50), nullable=True),  # elicitation, cli, dashboard, …
    Column("wait_ms", Integer, nullable=True),
    # ok, isError, protocol_error, timeout, not_run, rate_limited
    Column("outcome", String(20), nullable=False),
    Column("detail", Text, nullable=True),
    Column("latency_ms", Integer, nullable=True),
    # Who the gateway let in (a key's name, "oauth:<subject>", "local", "anonymous"), and the
    # OAuth client it came through. The client_* columns are what the client said of itself.
    Column("principal", String(200), nullable=True, index=True),
    Column("principal_client", String(200), nullable=True),
    # What the record is: a call, a gap (records that had to be dropped) or an anchor (records
    # retention deleted). A call whose outcome is "started" was recorded before it ran and has not
    # been completed (its gateway stopped or died meanwhile).
    Column("kind", String(10), nullable=False, server_default="call"),
    Column("facts", Text, nullable=True),  # JSON: what a gap or an anchor says, as values
    # The gateway process that wrote the record (`replica`), where replicas share the store; None
    # for records written before records named one.
    Column("replica", String(64), nullable=True),
    # The record's places in the audit chain (store/audit/): its first entry, and for a
    # call recorded before it ran, the entry that completed it. None before the chain existed.
    Column("seq", BigInteger, nullable=True, unique=True),
    Column("mac", String(64), nullable=True),
    Column("done_seq", BigInteger, nullable=True, unique=True),
    Column("done_mac", String(64), nullable=True),
)

# The head of the audit chain: the last entry's place and MAC, locked by each append, and the
# fingerprint of the key the chain is kept with (None until its first entry), so a gateway or a
# `toolkeeper audit verify` with another key is told so instead of reporting every record changed.
audit_chain = Table(
    "audit_chain",
    metadata,
    Column("name", String(32), primary_key=True),
    Column("seq", BigInteger, nullable=False),
    Column("mac", String(64), nullable=False),
    Column("key_fingerprint", String(64), nullable=True),
)

# The keys HTTP clients authenticate with. Only the SHA-256 of a token is kept: the token itself
# is shown once, when the key is made. `prefix` (the token's first characters) is what people see
# and what finds the key; `toolsets` and `servers` are JSON lists that narrow what it sees.
client_keys = Table(
    "client_keys",
    metadata,
    Column("name", String(100), primary_key=True),
    Column("prefix", String(20), nullable=False),
    Column("token_sha256", String(64), nullable=False),
    Column("toolsets", Text, nullable=False),
    Column("servers", Text, nullable=False),
    Column("admin", Boolean, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=True),
    Column("last_used_at", DateTime(timezone=True), nullable=True),
    UniqueConstraint("prefix", name="uq_client_keys_prefix"),
)

# What each principal's tool search added to its tools/list (runtime/working_sets.py), in the
# order added; `last_used` orders evictions (least recently found or called goes first). A
# handshake-era session's working set lives in memory only and is never written here.
working_sets = Table(
    "working_sets",
    metadata,
    Column("principal", String(200), primary_key=True),
    Column("exposed_name", String(200), primary_key=True),
    Column("position", Integer, nullable=False),
    Column("last_used", DateTime(timezone=True), nullable=False),
)

# The accounts the gateway signed in to remote servers with: one row per server and account (the
# gateway's own, or a principal's identity). `sealed` holds the tokens and the registered client,
# encrypted with the sign-in key (store/signin_key.py), never in clear; `subject`, `issuer` and
# `registration` are copies of what the sealed part says, for listings that must not open it.
signin_tokens = Table(
    "signin_tokens",
    metadata,
    Column("server", String(100), primary_key=True),
    Column("account", String(200), primary_key=True),
    Column("sealed", Text, nullable=False),
    Column("subject", Text, nullable=True),
    Column("issuer", Text, nullable=True),
    Column("registration", String(40), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

# The rate limits' buckets where replicas share a PostgreSQL store (store/rate_buckets.py): one
# per principal, and per principal and limited tool. `refilled_at` is when the bucket is full
# again, in seconds since the epoch by the database's clock; a row in the past is a full bucket.
# Unlogged on PostgreSQL (see its migration).
rate_buckets = Table(
    "rate_buckets",
    metadata,
    Column("subject", Text, primary_key=True),
    Column("refilled_at", Float, nullable=False),
)

# Small facts about the gateway that outlive a restart (the equipped toolset).
gateway_state = Table(
    "gateway_state",
    metadata,
    Column("key", String(100), primary_key=True),
    Column("value", Text, nullable=True),
)

# Bumped by every write, so a running gateway notices what the CLI (or another replica) changed.
store_revision = Table(
    "store_revision",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("value", BigInteger, nullable=False),
)

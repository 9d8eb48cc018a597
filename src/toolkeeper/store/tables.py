"""The store's tables. Changing them means adding a migration in `migrations/versions/`."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    ForeignKey,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
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

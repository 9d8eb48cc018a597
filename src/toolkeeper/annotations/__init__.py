"""Behaviour hints: what servers declared, what the gateway infers, what the person pinned, and
which of them each client sees (effective.py)."""

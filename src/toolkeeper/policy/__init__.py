"""The approval policy: for each call, allow, ask or deny, and why (see docs/architecture.md)."""

"""Toolsets: which tools are exposed now, and the notes a person attached to them."""

"""Bundled demo MCP servers (``notes`` and ``files``) used by the demo configuration and the tests."""

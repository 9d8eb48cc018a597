"""toolkeeper: an MCP gateway that aggregates servers, curates toolsets and gets hints right."""

__version__ = "0.1.0"

"""The gateway: what MCP clients connect to."""

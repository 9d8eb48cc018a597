"""The service layer: every operation a person can do, once, for the MCP, CLI and web faces."""

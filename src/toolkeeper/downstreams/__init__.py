"""McpConnection connections: one supervised, persistent session per downstream server."""

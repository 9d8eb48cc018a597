"""Upstream connections: one supervised, persistent session per downstream server."""

"""Downstreams: the tool sources the gateway connects to, of each kind it knows (kinds.py)."""

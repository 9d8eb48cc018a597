"""Signing in to remote MCP servers that ask for OAuth, as their client: the gateway holds its own
tokens (never a client's), one account for the gateway or one per principal.

`tokens.py` is what every part shares: a signed-in account's tokens (`SignedIn`), where they are
kept (`TokenShelf`, which the store implements, encrypted), and whose account a call uses
(`calling_account`). `flow.py` signs one account in (the SDK's OAuth client, checked by
`guard.py`), `renewal.py` renews and revokes, `keeper.py` (`SignIns`) keeps every account in
memory, and `auth.py` puts the token on each request.
"""

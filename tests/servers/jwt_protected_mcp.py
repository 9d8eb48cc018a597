"""A remote MCP server that trusts a separate authorization server: the same tools as
protected_mcp.py (`whoami`, `echo`), over streamable HTTP, accepting only JWTs that the issuer
given on the command line signed (checked against its published key set), issued for this server
(`aud` is its `/mcp` URL) and not expired. It has no authorization server of its own; its
protected resource metadata (RFC 9728) sends clients to the issuer.

    python tests/servers/jwt_protected_mcp.py --issuer http://127.0.0.1:PORT
    # prints the port it listens on, then serves http://127.0.0.1:PORT/mcp
"""

from __future__ import annotations

import argparse
import socket
from collections import Counter

import anyio
import jwt
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from protected_mcp import mcp_server, serve


class IssuerKeys:
    """The bearer check: a JWT signed by one of the issuer's keys, for this resource."""

    def __init__(self, issuer: str, resource: str) -> None:
        self.issuer = issuer
        self.resource = resource
        self.keys = jwt.PyJWKClient(f"{issuer}/jwks", cache_keys=True)

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            key = await anyio.to_thread.run_sync(self.keys.get_signing_key_from_jwt, token)
            claims = jwt.decode(
                token,
                key.key,
                algorithms=["RS256"],
                issuer=self.issuer,
                audience=self.resource,
                options={"require": ["exp", "iss", "aud", "sub"]},
            )
        except (jwt.PyJWTError, OSError):
            return None
        return AccessToken(
            token=token,
            client_id=str(claims.get("client_id", "")),
            scopes=str(claims.get("scope") or "").split(),
            expires_at=int(claims["exp"]),
            resource=self.resource,
            subject=str(claims["sub"]),
            claims={"iss": claims["iss"]},
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--issuer", required=True, help="the authorization server whose JWTs are accepted")
    parser.add_argument("--port", type=int, default=0, help="the port (default: a free one, printed)")
    args = parser.parse_args()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    resource = f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
    auth = AuthSettings.model_validate(
        {
            "issuer_url": args.issuer.rstrip("/"),
            "resource_server_url": resource,
            # IssuerKeys checks the audience itself.
            "validate_token_resource": False,
        }
    )
    app = mcp_server(Counter()).streamable_http_app(
        streamable_http_path="/mcp",
        host="127.0.0.1",
        auth=auth,
        token_verifier=IssuerKeys(args.issuer, resource),
    )
    anyio.run(serve, app, sock)


if __name__ == "__main__":
    main()

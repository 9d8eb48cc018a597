"""The gateway's own client ID metadata document: the spec's first choice of registration, where
the authorization server takes one. Its URL is the client id; the authorization server fetches
it, so it is published only where the gateway can be reached from outside at an https address
(`http.publicUrl`, as behind a reverse proxy), and names the callback there as the one way back.
"""

from __future__ import annotations

from typing import Any

from mcp.client.auth.utils import is_valid_client_metadata_url

DOCUMENT_PATH = "/oauth/client-metadata.json"
CALLBACK_PATH = "/oauth/callback"
CLIENT_NAME = "toolkeeper"


def document_url(public_url: str | None) -> str | None:
    """Where the document is published, when the gateway has a public https address; else None
    (an authorization server could not fetch it, and the SDK takes only https)."""
    if public_url is None:
        return None
    url = public_url.rstrip("/") + DOCUMENT_PATH
    return url if is_valid_client_metadata_url(url) else None


def callback_url(public_url: str) -> str:
    return public_url.rstrip("/") + CALLBACK_PATH


def client_document(public_url: str) -> dict[str, Any] | None:
    """The document for the gateway at `public_url`; None where it publishes none."""
    url = document_url(public_url)
    if url is None:
        return None
    return {
        "client_id": url,
        "client_name": CLIENT_NAME,
        "redirect_uris": [callback_url(public_url)],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        # A public client: a document is public, so it can name no secret.
        "token_endpoint_auth_method": "none",
    }

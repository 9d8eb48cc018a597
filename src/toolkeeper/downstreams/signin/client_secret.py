"""How a client the gateway was given (pre-registered, or its client_credentials) sends its secret
to the token endpoint: the way the authorization server's metadata says it takes one."""

from __future__ import annotations

from mcp.client.auth.oauth2 import OAuthContext

# How a client with a secret can authenticate at the token endpoint.
SECRET_METHODS = ("client_secret_basic", "client_secret_post")


def authenticate_as_metadata_allows(context: OAuthContext) -> None:
    """A client the gateway was given (pre-registered, or its client_credentials) sends its
    secret the way the authorization server takes one: the first of its metadata's methods that
    sends a secret, or HTTP Basic, the default of RFC 8414, when it names none. (A dynamically
    registered client keeps the method its registration answer gave: callers apply this to given
    clients only.)"""
    info = context.client_info
    if info is None or not info.client_secret or info.token_endpoint_auth_method not in SECRET_METHODS:
        return
    metadata = context.oauth_metadata
    offered = (metadata.token_endpoint_auth_methods_supported if metadata is not None else None) or [
        "client_secret_basic"
    ]
    chosen = next((method for method in offered if method in SECRET_METHODS), None)
    if chosen is not None and chosen != info.token_endpoint_auth_method:
        context.client_info = info.model_copy(update={"token_endpoint_auth_method": chosen})

"""The gateway signing itself in with its client's id and secret (`client_credentials`): the SDK's
provider, its secret sent the way the authorization server's metadata says it takes one. A
module of its own so that only a gateway with such a server loads the SDK's provider (and the
PyJWT it brings)."""

from __future__ import annotations

import httpx2
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider

from toolkeeper.downstreams.signin.client_secret import authenticate_as_metadata_allows
from toolkeeper.downstreams.signin.guard import check_metadata


class MachineProvider(ClientCredentialsOAuthProvider):
    async def _perform_authorization(self) -> httpx2.Request:
        check_metadata(self.context.oauth_metadata, self.context.server_url)
        authenticate_as_metadata_allows(self.context)
        return await super()._perform_authorization()

"""OAuth access tokens: the settings, the JWT verifier against a real local issuer (keys made
here, its JWKS and metadata over real HTTP), and the SDK's client-credentials provider getting a
token from that issuer."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import anyio
import httpx2
import pytest
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from oauth_issuer import OMIT, TestIssuer, ec_key, ed25519_key, rsa_key, running_issuer, serving
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from toolkeeper.config import ConfigError, parse_config_text
from toolkeeper.config.model import OAuthSettings
from toolkeeper.edge.oauth import (
    ALGORITHMS,
    INVALID_TOKEN_MESSAGE,
    KEYS_MAX_AGE,
    REFETCH_INTERVAL,
    InsufficientScope,
    InvalidToken,
    JwtVerifier,
    OAuthIdentity,
    PublishedKey,
    metadata_urls,
    published_keys,
)

pytestmark = pytest.mark.anyio
LOGGER = "toolkeeper.edge.oauth"


class Timer:
    """A monotonic clock the test moves: how the verifier measures time between fetches."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@asynccontextmanager
async def verifying(
    issuer: TestIssuer, *, timer: Timer | None = None, discover: bool = False, **settings: Any
) -> AsyncIterator[JwtVerifier]:
    """A verifier for `issuer`'s tokens (its JWKS URL configured unless `discover`), closed after."""
    settings.setdefault("jwks_uri", None if discover else issuer.jwks_uri)
    oauth = OAuthSettings(issuer=issuer.url, audience=issuer.audience, **settings)
    verifier = JwtVerifier(oauth, timer=timer or Timer())
    try:
        yield verifier
    finally:
        await verifier.aclose()


async def refused(verifier: JwtVerifier, token: str) -> str:
    """The message `token` is refused with (it must be refused as invalid)."""
    with pytest.raises(InvalidToken) as caught:
        await verifier.verify(token)
    return str(caught.value)


# --- tokens that are right ----------------------------------------------------------------------


async def test_a_right_token_names_its_subject_client_scopes_and_expiry(oauth_issuer: TestIssuer) -> None:
    exp = int(time.time()) + 120
    token = oauth_issuer.mint(sub="alice", client_id="cli", scope="mcp:tools mcp:read", exp=exp)
    async with verifying(oauth_issuer) as verifier:
        identity = await verifier.verify(token)
    assert identity == OAuthIdentity(
        subject="alice",
        client_id="cli",
        scopes=frozenset({"mcp:tools", "mcp:read"}),
        issuer=oauth_issuer.url,
        expires_at=exp,
        admin=False,
    )


@pytest.mark.parametrize(
    "make_key",
    [
        lambda: rsa_key("rs", "RS512"),
        lambda: rsa_key("ps", "PS256"),
        lambda: ec_key("es256", "ES256"),
        lambda: ec_key("es384", "ES384"),
        lambda: ec_key("es512", "ES512"),
        ed25519_key,
    ],
    ids=["RS512", "PS256", "ES256", "ES384", "ES512", "EdDSA"],
)
async def test_every_asymmetric_algorithm_verifies(oauth_issuer: TestIssuer, make_key: Any) -> None:
    key = oauth_issuer.publish(make_key())
    async with verifying(oauth_issuer) as verifier:
        identity = await verifier.verify(oauth_issuer.mint(key=key, sub=key.kid))
    assert identity.subject == key.kid


async def test_a_key_without_alg_verifies_every_algorithm_of_its_kind(oauth_issuer: TestIssuer) -> None:
    key = oauth_issuer.publish(replace(rsa_key("bare"), names_alg=False))
    async with verifying(oauth_issuer) as verifier:
        for alg in ("RS256", "PS384"):
            assert (await verifier.verify(oauth_issuer.mint(key=key, alg=alg))).subject == "user-1"


async def test_the_audience_may_differ_by_a_trailing_slash_or_sit_in_a_list(oauth_issuer: TestIssuer) -> None:
    async with verifying(oauth_issuer) as verifier:
        for aud in (
            oauth_issuer.audience + "/",
            ["https://other.example/api", oauth_issuer.audience],
        ):
            assert (await verifier.verify(oauth_issuer.mint(aud=aud))).subject == "user-1"


async def test_clocks_may_disagree_by_the_leeway(oauth_issuer: TestIssuer) -> None:
    now = int(time.time())
    async with verifying(oauth_issuer) as verifier:
        await verifier.verify(oauth_issuer.mint(exp=now - 10))
        await verifier.verify(oauth_issuer.mint(nbf=now + 10))


async def test_client_id_falls_back_to_azp_and_scopes_to_scp(oauth_issuer: TestIssuer) -> None:
    async with verifying(oauth_issuer) as verifier:
        from_azp = await verifier.verify(oauth_issuer.mint(client_id=OMIT, azp="web", scp=["a", "b"]))
        neither = await verifier.verify(oauth_issuer.mint(client_id=OMIT, scp="c d"))
    assert (from_azp.client_id, from_azp.scopes) == ("web", frozenset({"a", "b"}))
    assert (neither.client_id, neither.scopes) == (None, frozenset({"c", "d"}))


async def test_the_admin_scope_makes_an_admin(oauth_issuer: TestIssuer) -> None:
    async with verifying(oauth_issuer, admin_scope="mcp:admin") as verifier:
        admin = await verifier.verify(oauth_issuer.mint(scope="mcp:tools mcp:admin"))
        user = await verifier.verify(oauth_issuer.mint(scope="mcp:tools mcp:administrator"))
    assert (admin.admin, user.admin) == (True, False)


# --- tokens that are not ------------------------------------------------------------------------


def _forged_by_another_key(issuer: TestIssuer) -> str:
    """Signed by a key nobody published, under the published key's kid."""
    return issuer.mint(key=rsa_key(issuer.signing_key.kid))


def _rsa_kid_on_an_ec_signature(issuer: TestIssuer) -> str:
    """ES256 naming the RSA key: the RSA key must not be used for it."""
    return issuer.mint(key=ec_key(), kid=issuer.signing_key.kid)


AUDIENCE = "InvalidAudienceError: Audience doesn't match"
# Each bad token, and the reason its refusal logs: a refusal for another reason fails the test.
BAD_TOKENS: dict[str, tuple[Any, str]] = {
    "wrong audience": (lambda issuer: issuer.mint(aud="https://other.example/mcp"), AUDIENCE),
    "audience prefix": (lambda issuer: issuer.mint(aud=issuer.audience + "/x"), AUDIENCE),
    "audience in a list of others": (
        lambda issuer: issuer.mint(aud=["https://a.example", "https://b.example"]),
        AUDIENCE,
    ),
    "no audience": (lambda issuer: issuer.mint(aud=OMIT), 'missing the "aud" claim'),
    "wrong issuer": (lambda issuer: issuer.mint(iss="https://evil.example"), "Invalid issuer"),
    "issuer with a trailing slash": (lambda issuer: issuer.mint(iss=issuer.url + "/"), "Invalid issuer"),
    "no issuer": (lambda issuer: issuer.mint(iss=OMIT), 'missing the "iss" claim'),
    "expired": (lambda issuer: issuer.mint(exp=int(time.time()) - 31), "it expired at"),
    "no expiry": (lambda issuer: issuer.mint(exp=OMIT), 'missing the "exp" claim'),
    "expiry as text": (
        lambda issuer: issuer.mint(exp=str(int(time.time()) + 100)),
        "its exp is not a number",
    ),
    "not yet valid": (lambda issuer: issuer.mint(nbf=int(time.time()) + 120), "it is not valid before"),
    "missing sub": (lambda issuer: issuer.mint(sub=OMIT), 'missing the "sub" claim'),
    "empty sub": (lambda issuer: issuer.mint(sub=""), "its sub is empty"),
    "scope not text": (lambda issuer: issuer.mint(scope=5), "its scope is neither text nor a list"),
    "unknown kid": (lambda issuer: issuer.mint(kid="made-up"), "no RS256 key with kid 'made-up'"),
    "signed by another key": (_forged_by_another_key, "Signature verification failed"),
    "RSA kid on an EC signature": (_rsa_kid_on_an_ec_signature, "no ES256 key with kid 'rsa-1'"),
    "alg none": (lambda issuer: issuer.unsigned(), "the algorithm 'none' is not an asymmetric one"),
    "HS256 with the public key": (
        lambda issuer: issuer.hmac_signed_with_public_key(),
        "the algorithm 'HS256' is not an asymmetric one",
    ),
    "malformed": (lambda issuer: "not-a-jwt", "not a JWT"),
    "three garbage segments": (lambda issuer: "a.b.c", "not a JWT"),
    "empty": (lambda issuer: "", "not a JWT"),
    "too long": (lambda issuer: issuer.mint(padding="x" * 20_000), "longer than 16384 characters"),
}


@pytest.mark.parametrize(("make", "reason"), BAD_TOKENS.values(), ids=BAD_TOKENS.keys())
async def test_a_bad_token_is_refused_with_the_one_message_and_its_reason_logged_without_it(
    oauth_issuer: TestIssuer, make: Any, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    token = make(oauth_issuer)
    async with verifying(oauth_issuer) as verifier:
        await verifier.verify(oauth_issuer.mint())  # the keys are known: a refusal is the token's
        caplog.set_level(logging.DEBUG, logger=LOGGER)
        assert await refused(verifier, token) == INVALID_TOKEN_MESSAGE
    [logged] = [record.getMessage() for record in caplog.records if record.name == LOGGER]
    assert logged.startswith("access token refused: ")
    assert reason in logged
    # Not the token, nor its signature (the part that makes a stolen token usable).
    signature = token.rpartition(".")[2]
    assert len(token) < 16 or token not in caplog.text
    assert len(signature) < 16 or signature not in caplog.text


def test_a_key_is_used_only_for_algorithms_of_its_kind() -> None:
    def without_alg(key: Any) -> PublishedKey:
        return PublishedKey({name: value for name, value in key.public_jwk().items() if name != "alg"})

    keys = {"rsa": rsa_key("r"), "p384": ec_key("e", "ES384"), "ed": ed25519_key("d")}
    fitting = {
        name: [alg for alg in ALGORITHMS if without_alg(key).fits(kid=None, algorithm=alg)]
        for name, key in keys.items()
    }
    assert fitting == {
        "rsa": ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512"],
        "p384": ["ES384"],
        "ed": ["EdDSA"],
    }
    named = PublishedKey(rsa_key("n", "PS256").public_jwk())
    assert [alg for alg in ALGORITHMS if named.fits(kid="n", algorithm=alg)] == ["PS256"]
    assert not named.fits(kid="other", algorithm="PS256")


def test_only_public_signing_keys_of_a_key_set_are_used() -> None:
    signing = rsa_key("sig").public_jwk()
    for_encryption = {**rsa_key("enc").public_jwk(), "use": "enc"}
    with_private_part = {**signing, "kid": "leaked", "d": "AQAB"}
    keys = published_keys({"keys": [for_encryption, with_private_part, "junk", signing]})
    assert keys is not None
    assert [key.jwk["kid"] for key in keys] == ["sig"]
    assert published_keys({"keys": {}}) is None


async def test_an_unknown_kid_fetches_the_keys_again_and_is_still_refused(oauth_issuer: TestIssuer) -> None:
    timer = Timer()
    async with verifying(oauth_issuer, timer=timer) as verifier:
        await verifier.verify(oauth_issuer.mint())
        assert oauth_issuer.jwks_fetches == 1
        timer.advance(REFETCH_INTERVAL + 1)
        await refused(verifier, oauth_issuer.mint(kid="made-up"))
    assert oauth_issuer.jwks_fetches == 2


async def test_a_missing_required_scope_is_named(oauth_issuer: TestIssuer) -> None:
    async with verifying(oauth_issuer, required_scopes=("mcp:tools", "mcp:read", "mcp:x")) as verifier:
        with pytest.raises(InsufficientScope) as caught:
            await verifier.verify(oauth_issuer.mint(scope="mcp:read"))
        assert (await verifier.verify(oauth_issuer.mint(scope="mcp:x mcp:read mcp:tools"))).subject
    assert caught.value.missing == ("mcp:tools", "mcp:x")
    assert str(caught.value) == (
        "the access token lacks the scopes mcp:tools mcp:x: ask the authorization server for a "
        "token that grants them"
    )


async def test_an_invalid_token_is_invalid_before_its_scopes_count(oauth_issuer: TestIssuer) -> None:
    async with verifying(oauth_issuer, required_scopes=("mcp:tools",)) as verifier:
        await refused(verifier, oauth_issuer.mint(aud="https://other.example", scope=""))


# --- the issuer's keys --------------------------------------------------------------------------


async def test_a_rotated_key_is_picked_up_by_fetching_the_keys_again(oauth_issuer: TestIssuer) -> None:
    timer = Timer()
    async with verifying(oauth_issuer, timer=timer) as verifier:
        await verifier.verify(oauth_issuer.mint())
        new = oauth_issuer.publish(rsa_key("rsa-2"))
        # Just after a fetch, a new kid waits for the interval.
        await refused(verifier, oauth_issuer.mint(key=new))
        assert oauth_issuer.jwks_fetches == 1
        timer.advance(REFETCH_INTERVAL)
        assert (await verifier.verify(oauth_issuer.mint(key=new, sub="rotated"))).subject == "rotated"
        assert oauth_issuer.jwks_fetches == 2
        # The old key still verifies without another fetch.
        await verifier.verify(oauth_issuer.mint())
    assert oauth_issuer.jwks_fetches == 2


async def test_made_up_kids_fetch_the_keys_at_most_once_per_interval(oauth_issuer: TestIssuer) -> None:
    timer = Timer()
    async with verifying(oauth_issuer, timer=timer) as verifier:

        async def flood() -> None:
            async with anyio.create_task_group() as group:
                for n in range(40):
                    group.start_soon(refused, verifier, oauth_issuer.mint(kid=f"made-up-{n}"))

        await flood()  # the first fetch, then none
        assert oauth_issuer.jwks_fetches == 1
        timer.advance(REFETCH_INTERVAL - 1)
        await flood()
        assert oauth_issuer.jwks_fetches == 1
        timer.advance(1)
        await flood()
        assert oauth_issuer.jwks_fetches == 2


async def test_keys_that_cannot_be_fetched_make_the_token_invalid_and_a_warning(
    oauth_issuer: TestIssuer, caplog: pytest.LogCaptureFixture
) -> None:
    oauth_issuer.jwks_available = False
    caplog.set_level(logging.WARNING, logger=LOGGER)
    async with verifying(oauth_issuer) as verifier:
        await refused(verifier, oauth_issuer.mint())
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [f"cannot fetch the OAuth issuer's keys from {oauth_issuer.jwks_uri}: HTTP 503"]


async def test_an_issuer_that_does_not_answer_makes_the_token_invalid(
    oauth_issuer: TestIssuer, caplog: pytest.LogCaptureFixture
) -> None:
    token = oauth_issuer.mint()
    with running_issuer() as gone:
        unreachable = gone.jwks_uri
    async with verifying(oauth_issuer, jwks_uri=unreachable) as verifier:
        await refused(verifier, token)
    assert f"cannot fetch the OAuth issuer's keys from {unreachable}: ConnectError" in caplog.text


async def test_old_keys_are_refetched_and_kept_while_the_issuer_is_down(oauth_issuer: TestIssuer) -> None:
    timer = Timer()
    async with verifying(oauth_issuer, timer=timer) as verifier:
        await verifier.verify(oauth_issuer.mint())
        timer.advance(KEYS_MAX_AGE)
        oauth_issuer.jwks_available = False
        await verifier.verify(oauth_issuer.mint())
        assert oauth_issuer.jwks_fetches == 2
        # Back up, with the key withdrawn: once the keys are old again, its tokens are refused.
        oauth_issuer.jwks_available = True
        old = oauth_issuer.signing_key
        oauth_issuer.publish(rsa_key("rsa-2"))
        oauth_issuer.withdraw(old)
        timer.advance(KEYS_MAX_AGE)
        await refused(verifier, oauth_issuer.mint(key=old))
    assert oauth_issuer.jwks_fetches == 3


async def test_a_key_set_of_one_key_serves_a_token_without_kid(oauth_issuer: TestIssuer) -> None:
    timer = Timer()
    async with verifying(oauth_issuer, timer=timer) as verifier:
        assert (await verifier.verify(oauth_issuer.mint(kid=None))).subject == "user-1"
        # With two RSA keys, a token that names none names neither.
        oauth_issuer.publish(rsa_key("rsa-2"))
        timer.advance(KEYS_MAX_AGE)
        await refused(verifier, oauth_issuer.mint(kid=None))
    assert oauth_issuer.jwks_fetches == 2


# --- finding the keys from the issuer's metadata ------------------------------------------------


def test_metadata_urls_insert_the_issuers_path() -> None:
    assert metadata_urls("https://auth.example.com") == (
        "https://auth.example.com/.well-known/oauth-authorization-server",
        "https://auth.example.com/.well-known/openid-configuration",
    )
    assert metadata_urls("https://auth.example.com/tenant/") == (
        "https://auth.example.com/.well-known/oauth-authorization-server/tenant",
        "https://auth.example.com/tenant/.well-known/openid-configuration",
        "https://auth.example.com/.well-known/openid-configuration/tenant",
    )


@pytest.mark.parametrize(("path", "metadata"), [("", "oauth"), ("/tenant", "oauth"), ("/tenant", "openid")])
async def test_the_keys_are_found_from_the_issuers_metadata_once(path: str, metadata: str) -> None:
    timer = Timer()
    with running_issuer(path=path, metadata=metadata) as issuer:
        async with verifying(issuer, timer=timer, discover=True) as verifier:
            await verifier.verify(issuer.mint())
            timer.advance(REFETCH_INTERVAL)
            new = issuer.publish(ec_key())
            await verifier.verify(issuer.mint(key=new))
        assert (issuer.metadata_fetches, issuer.jwks_fetches) == (1, 2)


async def test_metadata_of_another_issuer_is_not_used(caplog: pytest.LogCaptureFixture) -> None:
    timer = Timer()
    with running_issuer(metadata="oauth") as issuer:
        real = issuer.url
        issuer.metadata_issuer = "https://evil.example"
        async with verifying(issuer, timer=timer, discover=True) as verifier:
            await refused(verifier, issuer.mint())
            await refused(verifier, issuer.mint())  # within the interval: not searched again
        assert issuer.metadata_fetches == 1
        assert issuer.jwks_fetches == 0
    assert f"{real}/.well-known/oauth-authorization-server: the metadata is for the issuer" in caplog.text


# --- the settings -------------------------------------------------------------------------------


def settings_of(auth: Any, env: dict[str, str] | None = None) -> Any:
    text = json.dumps({"mcpServers": {}, "toolkeeper": {"http": {"auth": auth}}})
    return parse_config_text(text, environ=env or {}).settings


def test_oauth_settings_from_the_file_and_the_mode_from_the_environment() -> None:
    oauth = {
        "issuer": "https://auth.example.com",
        "audience": "https://gw.example.com/mcp",
        "jwksUri": "https://keys.example.com/jwks.json",
        "requiredScopes": ["mcp:tools"],
        "adminScope": "mcp:admin",
    }
    settings = settings_of({"mode": "oauth", "oauth": oauth})
    assert settings.http_auth_mode == "oauth"
    assert settings.http_auth_oauth == OAuthSettings(
        issuer="https://auth.example.com",
        audience="https://gw.example.com/mcp",
        jwks_uri="https://keys.example.com/jwks.json",
        required_scopes=("mcp:tools",),
        admin_scope="mcp:admin",
    )
    local = {"issuer": "http://127.0.0.1:9000", "audience": "http://localhost:8765/mcp"}
    settings = settings_of({"oauth": local}, {"TOOLKEEPER_HTTP_AUTH_MODE": "keys+oauth"})
    assert settings.http_auth_mode == "keys+oauth"
    assert settings.http_auth_oauth == OAuthSettings(
        issuer="http://127.0.0.1:9000", audience="http://localhost:8765/mcp"
    )
    assert settings_of({}).http_auth_mode == "auto"
    assert settings_of({}).http_auth_oauth is None


GOOD = {"issuer": "https://auth.example.com", "audience": "https://gw.example.com/mcp"}
OAUTH = "<config>: toolkeeper.http.auth.oauth"


@pytest.mark.parametrize(
    ("auth", "env", "message"),
    [
        (
            {"mode": "sometimes"},
            {},
            "<config>: toolkeeper.http.auth.mode must be one of auto, keys, oauth, keys+oauth, none, "
            "got 'sometimes'.",
        ),
        (
            {},
            {"TOOLKEEPER_HTTP_AUTH_MODE": "OAuth"},
            "environment variable TOOLKEEPER_HTTP_AUTH_MODE must be one of auto, keys, oauth, keys+oauth, "
            "none, got 'OAuth'.",
        ),
        (
            {"mode": "oauth"},
            {},
            "<config>: toolkeeper.http.auth.mode is 'oauth', which needs toolkeeper.http.auth.oauth: write "
            '{"issuer": "https://auth.example.com", "audience": "https://gateway.example.com/mcp"} there '
            "with your authorization server and this gateway's URL, or choose the mode 'keys' or 'none'.",
        ),
        (
            {},
            {"TOOLKEEPER_HTTP_AUTH_MODE": "keys+oauth"},
            "environment variable TOOLKEEPER_HTTP_AUTH_MODE is 'keys+oauth', which needs "
            'toolkeeper.http.auth.oauth: write {"issuer": "https://auth.example.com", "audience": '
            '"https://gateway.example.com/mcp"} there with your authorization server and this gateway\'s '
            "URL, or choose the mode 'keys' or 'none'.",
        ),
        (
            {"oauth": "https://auth.example.com"},
            {},
            f'{OAUTH} must look like {{"issuer": "https://auth.example.com", "audience": '
            '"https://gateway.example.com/mcp"}, with optional "jwksUri", "requiredScopes" (a list of '
            'scopes) and "adminScope".',
        ),
        (
            {"oauth": {**GOOD, "scopes": []}},
            {},
            f'{OAUTH} must look like {{"issuer": "https://auth.example.com", "audience": '
            '"https://gateway.example.com/mcp"}, with optional "jwksUri", "requiredScopes" (a list of '
            'scopes) and "adminScope".',
        ),
        (
            {"oauth": {"audience": GOOD["audience"]}},
            {},
            f'{OAUTH} needs "issuer", like "https://auth.example.com".',
        ),
        (
            {"oauth": {"issuer": GOOD["issuer"]}},
            {},
            f'{OAUTH} needs "audience", like "https://gateway.example.com/mcp".',
        ),
        (
            {"oauth": {**GOOD, "issuer": "auth.example.com"}},
            {},
            f'{OAUTH}.issuer must be an absolute https URL like "https://auth.example.com", '
            "got 'auth.example.com'.",
        ),
        (
            {"oauth": {**GOOD, "issuer": 5}},
            {},
            f'{OAUTH}.issuer must be an absolute https URL like "https://auth.example.com", got 5.',
        ),
        (
            {"oauth": {**GOOD, "issuer": "https://auth.example.com:http"}},
            {},
            f'{OAUTH}.issuer must be an absolute https URL like "https://auth.example.com", '
            "got 'https://auth.example.com:http'.",
        ),
        (
            {"oauth": {**GOOD, "issuer": "http://auth.example.com"}},
            {},
            f"{OAUTH}.issuer must use https (http only for a loopback host such as 127.0.0.1), "
            "got 'http://auth.example.com'.",
        ),
        (
            {"oauth": {**GOOD, "issuer": "https://auth.example.com/?tenant=1"}},
            {},
            f"{OAUTH}.issuer must not hold a query, a fragment or a user name; write it like "
            '"https://auth.example.com".',
        ),
        (
            {"oauth": {**GOOD, "audience": "ftp://gw.example.com/mcp"}},
            {},
            f'{OAUTH}.audience must be an absolute https URL like "https://gateway.example.com/mcp", '
            "got 'ftp://gw.example.com/mcp'.",
        ),
        (
            {"oauth": {**GOOD, "audience": "https://gw.example.com/mcp#top"}},
            {},
            f"{OAUTH}.audience must not hold a fragment or a user name; write it like "
            '"https://gateway.example.com/mcp".',
        ),
        (
            {"oauth": {**GOOD, "jwksUri": "http://keys.example.com/jwks"}},
            {},
            f"{OAUTH}.jwksUri must use https (http only for a loopback host such as 127.0.0.1), "
            "got 'http://keys.example.com/jwks'.",
        ),
        (
            {"oauth": {**GOOD, "requiredScopes": "mcp:tools"}},
            {},
            f"{OAUTH}.requiredScopes must be a list of scopes like [\"mcp:tools\"], got 'mcp:tools'.",
        ),
        (
            {"oauth": {**GOOD, "requiredScopes": ["mcp:tools mcp:read"]}},
            {},
            f'{OAUTH}.requiredScopes must name scopes as words without spaces, like "mcp:admin"; '
            "got 'mcp:tools mcp:read'.",
        ),
        (
            {"oauth": {**GOOD, "adminScope": ["mcp:admin"]}},
            {},
            f'{OAUTH}.adminScope must name scopes as words without spaces, like "mcp:admin"; '
            "got ['mcp:admin'].",
        ),
        (
            {"method": "oauth"},
            {},
            '<config>: toolkeeper.http.auth must look like {"mode": "oauth", "oauth": {"issuer": '
            '"https://auth.example.com", "audience": "https://gateway.example.com/mcp"}}, with the mode '
            "one of auto, keys, oauth, keys+oauth, none.",
        ),
    ],
)
def test_a_bad_auth_setting_is_one_line_naming_the_key(auth: Any, env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        settings_of(auth, env)
    assert str(caught.value) == message
    assert "\n" not in message


# --- the SDK's OAuth client against the test issuer ---------------------------------------------


class MemoryTokenStorage:
    """The SDK's TokenStorage, kept in memory."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


def stand_in_resource(issuer: TestIssuer, seen: list[str]) -> Starlette:
    """The least a protected resource answers for the SDK's flow to run: 401 with its metadata's
    URL (RFC 9728), the metadata naming the issuer and the scopes, and 200 to a bearer token,
    which it keeps for the test to verify."""

    def base(request: Request) -> str:
        return f"{request.url.scheme}://{request.url.netloc}"

    async def metadata(request: Request) -> Response:
        return JSONResponse(
            {
                "resource": f"{base(request)}/mcp",
                "authorization_servers": [issuer.url],
                "scopes_supported": ["mcp:tools"],
            }
        )

    async def endpoint(request: Request) -> Response:
        authorization = request.headers.get("authorization", "")
        if not authorization.startswith("Bearer "):
            challenge = f'Bearer resource_metadata="{base(request)}/.well-known/oauth-protected-resource/mcp"'
            return Response(status_code=401, headers={"WWW-Authenticate": challenge})
        seen.append(authorization.removeprefix("Bearer "))
        return JSONResponse({"ok": True})

    return Starlette(
        routes=[
            Route("/.well-known/oauth-protected-resource/mcp", metadata),
            Route("/mcp", endpoint, methods=["GET", "POST"]),
        ]
    )


async def test_the_sdks_client_credentials_provider_gets_a_token_the_verifier_accepts(
    oauth_issuer: TestIssuer,
) -> None:
    secret = oauth_issuer.register_client("ci-bot", "mcp:tools", "mcp:admin")
    seen: list[str] = []
    with serving(stand_in_resource(oauth_issuer, seen)) as base:
        provider = ClientCredentialsOAuthProvider(
            server_url=f"{base}/mcp",
            storage=MemoryTokenStorage(),
            client_id="ci-bot",
            client_secret=secret,
            issuer=oauth_issuer.url,
        )
        async with httpx2.AsyncClient(auth=provider) as http:
            response = await http.post(f"{base}/mcp", json={})
        assert response.status_code == 200
        [token] = seen
        # The token is for the resource's URL, with the scope its metadata named.
        assert oauth_issuer.token_requests[-1]["resource"] == f"{base}/mcp"
        oauth_issuer.audience = f"{base}/mcp"
        async with verifying(oauth_issuer) as verifier:
            identity = await verifier.verify(token)
    assert (identity.subject, identity.client_id, identity.scopes) == ("ci-bot", "ci-bot", {"mcp:tools"})


async def test_the_issuer_refuses_a_client_with_the_wrong_secret(oauth_issuer: TestIssuer) -> None:
    oauth_issuer.register_client("ci-bot", "mcp:tools")
    async with httpx2.AsyncClient() as http:
        response = await http.post(
            oauth_issuer.token_endpoint,
            data={"grant_type": "client_credentials", "client_id": "ci-bot", "client_secret": "guess"},
        )
    assert (response.status_code, response.json()) == (401, {"error": "invalid_client"})

"""The failure throttle in process, on an injected clock: its backoff grows and is forgotten,
it stays bounded, and at the HTTP edge an attacker's failures from many addresses cost the
attacker while a valid key is always admitted."""

from __future__ import annotations

import logging

import pytest
from test_auth_edge import TOKEN, admit, authenticator, ring

from toolkeeper.edge.throttle import (
    FIRST_DELAY,
    FORGET_AFTER,
    FREE_FAILURES,
    MAX_DELAY,
    FailureThrottle,
    address_key,
)
from toolkeeper.services.keys import TOKEN_START

pytestmark = pytest.mark.anyio

ATTACKER = "203.0.113.7"
WRONG_SECRET = TOKEN[:11] + "B" * 35  # alice's prefix, not her secret
UNKNOWN_KEY = TOKEN_START + "Z" * 43


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_backoff_starts_after_the_free_failures_doubles_up_to_its_cap_and_is_forgotten_after_quiet() -> None:
    clock = Clock()
    throttle = FailureThrottle(clock)
    for _ in range(FREE_FAILURES):
        assert throttle.failed(ATTACKER, "a wrong token") == 0
    assert throttle.blocked_for(ATTACKER) == 0
    waits = [throttle.failed(ATTACKER, "a wrong token") for _ in range(12)]
    assert waits[:4] == [FIRST_DELAY, 2 * FIRST_DELAY, 4 * FIRST_DELAY, 8 * FIRST_DELAY]
    assert waits[-1] == MAX_DELAY and max(waits) == MAX_DELAY
    assert throttle.blocked_for(ATTACKER) == MAX_DELAY
    assert throttle.blocked_for("198.51.100.1") == 0  # another address is not held back

    clock.now += MAX_DELAY  # the throttle ends, the failures are still remembered
    assert throttle.blocked_for(ATTACKER) == 0
    assert throttle.failed(ATTACKER, "a wrong token") == MAX_DELAY

    clock.now += FORGET_AFTER  # quiet for long enough: forgotten, the free failures are back
    assert throttle.blocked_for(ATTACKER) == 0
    assert len(throttle.addresses) == 0
    assert throttle.failed(ATTACKER, "a wrong token") == 0


def test_a_credential_has_a_backoff_of_its_own_across_addresses() -> None:
    clock = Clock()
    throttle = FailureThrottle(clock)
    for n in range(FREE_FAILURES + 1):
        throttle.failed(f"198.51.100.{n}", "a wrong secret", "key 'alice' (tk_AAAAAAAA)")
    assert throttle.blocked_for("192.0.2.1") == 0
    assert throttle.blocked_for("192.0.2.1", "key 'alice' (tk_AAAAAAAA)") == FIRST_DELAY
    assert throttle.blocked_for("192.0.2.1", "key 'bob' (tk_BBBBBBBB)") == 0


def test_what_is_remembered_is_bounded_and_the_longest_quiet_goes_first() -> None:
    clock = Clock()
    throttle = FailureThrottle(clock, capacity=50)
    for _ in range(FREE_FAILURES + 1):
        throttle.failed(ATTACKER, "a wrong token")
    for n in range(49):
        clock.now += 0.001
        throttle.failed(f"10.0.{n // 250}.{n % 250}", "a wrong token")
    assert len(throttle.addresses) == 50 and throttle.blocked_for(ATTACKER) > 0
    clock.now += 0.001
    throttle.failed("10.9.9.9", "a wrong token")
    assert len(throttle.addresses) == 50
    assert throttle.blocked_for(ATTACKER) == 0  # the one that failed longest ago was dropped


def test_an_ipv6_subscriber_is_counted_by_its_64_and_a_mapped_ipv4_as_itself() -> None:
    assert address_key("2001:db8:1:2::1") == address_key("2001:db8:1:2:ffff::9") == "2001:db8:1:2::/64"
    assert address_key("2001:db8:1:3::1") != address_key("2001:db8:1:2::1")
    assert address_key("::ffff:192.0.2.4") == "192.0.2.4"
    assert address_key("unknown") == "unknown"
    throttle = FailureThrottle(Clock())
    for n in range(FREE_FAILURES + 1):
        throttle.failed(f"2001:db8:1:2::{n + 1}", "a wrong token")
    assert throttle.blocked_for("2001:db8:1:2::abcd") > 0


async def test_after_many_bad_tokens_from_an_address_a_valid_key_from_it_is_still_admitted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    auth = authenticator(ring())
    with caplog.at_level(logging.WARNING):
        statuses = [(await admit(auth, f"Bearer {UNKNOWN_KEY}", ATTACKER))[1].status for _ in range(10)]
    assert statuses[:FREE_FAILURES] == [401] * FREE_FAILURES
    assert statuses[FREE_FAILURES:] == [429] * (10 - FREE_FAILURES)
    _, refused = await admit(auth, "Bearer not-a-key", ATTACKER)
    assert refused.status == 429 and int(refused.headers["retry-after"]) >= 1

    principal, answer = await admit(auth, f"Bearer {TOKEN}", ATTACKER)  # the key's holder, same NAT
    assert answer.messages == [] and principal.name == "alice"
    assert ATTACKER in caplog.text and UNKNOWN_KEY not in caplog.text


async def test_guesses_at_one_key_from_many_addresses_are_throttled_and_its_holder_still_gets_in(
    caplog: pytest.LogCaptureFixture,
) -> None:
    auth = authenticator(ring())
    addresses = [f"198.51.100.{n}" for n in range(1, 21)]
    with caplog.at_level(logging.WARNING):
        answers = [(await admit(auth, f"Bearer {WRONG_SECRET}", address))[1] for address in addresses]
    # Each address failed once, but all of them tried alice's key: it is throttled for everyone.
    assert [a.status for a in answers[:FREE_FAILURES]] == [401] * FREE_FAILURES
    assert {a.status for a in answers[FREE_FAILURES:]} == {429}
    # A made-up key from a fresh address is not held back by alice's throttle.
    _, answer = await admit(auth, f"Bearer {UNKNOWN_KEY}", "192.0.2.99")
    assert answer.status == 401
    principal, answer = await admit(auth, f"Bearer {TOKEN}", "192.0.2.50")
    assert answer.messages == [] and principal.name == "alice"
    assert "key 'alice' (tk_AAAAAAAA)" in caplog.text  # who was tried, by the public prefix
    assert WRONG_SECRET[11:] not in caplog.text


async def test_a_flood_of_failures_is_counted_but_logged_only_at_powers_of_two(
    caplog: pytest.LogCaptureFixture,
) -> None:
    auth = authenticator(ring())
    with caplog.at_level(logging.WARNING, logger="toolkeeper.edge.throttle"):
        for _ in range(100):
            await admit(auth, "Bearer not-a-key", ATTACKER)
    lines = [r for r in caplog.records if "authentication failed" in r.getMessage()]
    assert len(lines) == FREE_FAILURES + 4  # 1..5, then 8, 16, 32, 64
    assert "[64 failures; throttled for 900 s]" in lines[-1].getMessage()

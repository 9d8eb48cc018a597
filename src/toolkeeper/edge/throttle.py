"""Failed authentications, counted so that failing costs whoever fails, never the holder of a
valid credential.

Each failure counts against two things, each with a backoff of its own:
- the **address** it came from (an IPv6 address by its /64, the block one subscriber holds, so
  that stepping through it does not give a fresh count each time);
- the **credential** it claimed to be: a client key, by its public prefix, when the gateway
  has a key with that prefix; the dashboard's token, for a token sent to the dashboard that is
  no client key. A made-up prefix names nothing, so guesses cannot fill this table.

The first `FREE_FAILURES` failures cost nothing (typing mistakes happen). Each failure after
them throttles its address and credential for twice as long as the one before, from
`FIRST_DELAY` up to `MAX_DELAY`; every attempt that fails while throttled counts too, so
insisting only makes the wait longer. An address or credential with no failure for
`FORGET_AFTER` is forgotten; at most `MAX_TRACKED` of each are remembered, the ones quiet the
longest forgotten first.

What a throttle holds back depends on whether a guess could ever succeed:
- **A credential nobody can guess is always checked**, and a valid one is admitted whatever
  its address or prefix suffered: a client key (256 random bits), an OAuth access token (signed
  by the issuer), a dashboard token as long as the one toolkeeper makes. Refusing it unread
  would let anyone who shares its address (a NAT, a proxy, this machine) or has seen its prefix
  lock its holder out, and would protect nothing, since no rate of guessing finds such a
  secret. Checking it costs one digest or one signature. A failure while throttled is answered
  429 with the time left, instead of 401.
- **A dashboard token shorter than that may be guessable**: while its address or the token
  itself is throttled it is not compared at all. Its holder can still sign in with an admin
  client key, or set a longer token.

The log gets each of the first failures and then one line at every power of two, so a flood of
guesses cannot fill it. Lines name the address, what was sent and the credential it claimed
(a key's name and prefix), never a token.
"""

from __future__ import annotations

import ipaddress
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

logger = logging.getLogger(__name__)

FREE_FAILURES = 5
FIRST_DELAY = 1.0
MAX_DELAY = 15 * 60.0
FORGET_AFTER = 60 * 60.0
MAX_TRACKED = 10_000
# Past this many doublings the delay is MAX_DELAY anyway; it keeps the power small.
MAX_DOUBLINGS = 30
# The number of leading bits that name one IPv6 subscriber.
IPV6_SUBSCRIBER_BITS = 64


@dataclass(slots=True)
class Backoff:
    """The failures of one address or credential since it was last forgotten."""

    failures: int = 0
    last: float = 0.0  # when the last one came
    until: float = 0.0  # throttled until then

    def delay(self) -> float:
        """How long the latest failure throttles for."""
        beyond = self.failures - FREE_FAILURES
        if beyond <= 0:
            return 0.0
        return min(FIRST_DELAY * (1 << min(beyond - 1, MAX_DOUBLINGS)), MAX_DELAY)

    def quiet_since(self, now: float) -> bool:
        """Whether nothing failed for `FORGET_AFTER` and no throttle is left: time to forget."""
        return now - self.last >= FORGET_AFTER and now >= self.until

    def worth_logging(self) -> bool:
        return self.failures <= FREE_FAILURES or self.failures & (self.failures - 1) == 0


class Backoffs:
    """Backoffs by name, the one that failed last at the end, at most `capacity` of them."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[str, Backoff] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def left(self, name: str, now: float) -> float:
        """Seconds `name` stays throttled (0: not throttled)."""
        entry = self._entries.get(name)
        if entry is None:
            return 0.0
        if entry.quiet_since(now):
            del self._entries[name]
            return 0.0
        return max(0.0, entry.until - now)

    def fail(self, name: str, now: float) -> Backoff:
        """Count a failure of `name` at `now`: its backoff, grown."""
        self._forget_quiet(now)
        entry = self._entries.pop(name, None)
        if entry is None or entry.quiet_since(now):
            entry = Backoff()
        entry.failures += 1
        entry.last = now
        entry.until = now + entry.delay()
        self._entries[name] = entry
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)
        return entry

    def _forget_quiet(self, now: float) -> None:
        """Drop the quiet entries at the front (the oldest failures)."""
        while self._entries:
            name, oldest = next(iter(self._entries.items()))
            if not oldest.quiet_since(now):
                return
            del self._entries[name]


def address_key(address: str) -> str:
    """What an address is counted under: an IPv6 address by its subscriber's /64 (an IPv4 one
    written as IPv6 as itself); anything else (a name, "unknown") as it is."""
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(parsed, ipaddress.IPv6Address):
        if parsed.ipv4_mapped is not None:
            return str(parsed.ipv4_mapped)
        return str(ipaddress.ip_network(f"{parsed}/{IPV6_SUBSCRIBER_BITS}", strict=False))
    return str(parsed)


class FailureThrottle:
    """Failed authentications by address and by credential, with their backoffs: shared by
    `/mcp` and the dashboard when they share a port."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, *, capacity: int = MAX_TRACKED) -> None:
        self.clock = clock
        self.addresses = Backoffs(capacity)
        self.credentials = Backoffs(capacity)

    def blocked_for(self, address: str, credential: str | None = None) -> float:
        """Seconds the address, or the credential when one is named, stays throttled (0: neither is)."""
        now = self.clock()
        left = self.addresses.left(address_key(address), now)
        if credential is not None:
            left = max(left, self.credentials.left(credential, now))
        return left

    def failed(self, address: str, what: str, credential: str | None = None) -> float:
        """Count a failure from `address` (what was sent, for the log) that claimed
        `credential`, if it names one; seconds the answer tells the client to wait (0: none).
        Steps: count it against the address, then against the credential, then log it if it
        is worth a line."""
        now = self.clock()
        counted = [self.addresses.fail(address_key(address), now)]
        if credential is not None:
            counted.append(self.credentials.fail(credential, now))
        wait = max(0.0, *(entry.until - now for entry in counted))
        if any(entry.worth_logging() for entry in counted):
            claimed = f" ({credential})" if credential is not None else ""
            failures = max(entry.failures for entry in counted)
            throttled = f"; throttled for {wait:.0f} s" if wait else ""
            logger.warning(
                "authentication failed from %s: %s%s [%d failures%s]",
                address,
                what,
                claimed,
                failures,
                throttled,
            )
        return wait

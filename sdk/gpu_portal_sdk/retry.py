"""When to try an HTTP call again, and how long to wait first.

A call is *repeatable* when sending it twice does what sending it once does: a read (GET, HEAD,
OPTIONS), or a write that carries an Idempotency-Key (the client makes one key per call and sends it
with every try; the portal answers a repeat with the first answer and does not write again). The
rule, per failure:

| failure                                       | repeatable call | other POST |
| --------------------------------------------- | --------------- | ---------- |
| 429 Too Many Requests                         | retry           | retry      |
| 503 Service Unavailable                       | retry           | retry      |
| 502 Bad Gateway, 504 Gateway Timeout          | retry           | **no**     |
| could not connect (refused, DNS, connect timeout) | retry       | retry      |
| connection lost or read timeout after sending | retry           | **no**     |

429 and 503 mean the portal refused or did not finish the call (a database error rolls a write back),
and a failed connect means the request never left, so those are safe to repeat; a proxy's 502/504 or
a connection dropped after the request was sent may hide a write that went through, and only its key
makes repeating it safe. The caller sees those as ServiceUnavailableError or ConnectionFailedError.

Waits: the portal's Retry-After when it gives one (seconds or an HTTP date), otherwise
exponential backoff with full jitter: uniform in [0, min(cap, base * 2**attempt)]; at most
max_retries of them.
"""

import datetime as dt
import email.utils
import random as _random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import requests
from urllib3.exceptions import ConnectTimeoutError

RETRY_STATUSES = frozenset({429, 502, 503, 504})
REFUSED_BEFORE_ACTING = frozenset({429, 503})
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


@dataclass
class RetryPolicy:
    """At most `max_retries` more tries after the first; `sleep` and `random` are injectable for tests."""

    max_retries: int = 3
    backoff_base_s: float = 0.5
    backoff_cap_s: float = 30.0
    sleep: Callable[[float], None] = field(default=time.sleep)
    random: Callable[[], float] = field(default=_random.random)

    def retries_status(self, method: str, status: int, keyed: bool = False) -> bool:
        """`keyed`: the call carries an Idempotency-Key."""
        if status not in RETRY_STATUSES:
            return False
        return repeatable(method, keyed) or status in REFUSED_BEFORE_ACTING

    def retries_error(self, method: str, error: requests.RequestException, keyed: bool = False) -> bool:
        if not isinstance(error, requests.ConnectionError | requests.Timeout):
            return False
        return repeatable(method, keyed) or never_sent(error)

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait before retry number `attempt` (0-based)."""
        if retry_after is not None:
            return retry_after
        return self.random() * min(self.backoff_cap_s, self.backoff_base_s * 2**attempt)


def repeatable(method: str, keyed: bool) -> bool:
    """Sending the call twice does what sending it once does."""
    return method in SAFE_METHODS or keyed


def never_sent(error: requests.RequestException) -> bool:
    """True when the connection itself failed, so not a byte of the request reached the server."""
    if isinstance(error, requests.ConnectTimeout):
        return True
    # requests wraps urllib3's MaxRetryError; its reason says what went wrong. NewConnectionError
    # (refused, no route) and NameResolutionError are ConnectTimeoutError subclasses in urllib3 2.
    reason = getattr(error.args[0], "reason", None) if error.args else None
    return isinstance(reason, ConnectTimeoutError)


def parse_retry_after(value: str | None, now: dt.datetime | None = None) -> float | None:
    """Retry-After as seconds from now: delta-seconds or an HTTP date; None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    now = now or dt.datetime.now(dt.UTC)
    return max(0.0, (when - now).total_seconds())

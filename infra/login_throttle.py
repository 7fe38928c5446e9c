"""Sign-in throttling: at most LOGIN_FAILURES_PER_ACCOUNT failed sign-ins per account (username) and
LOGIN_FAILURES_PER_ADDRESS per client address in each window of LOGIN_FAILURE_WINDOW_S seconds.

Each attempt is counted before the password is checked (atomic counters, infra.rate_limits), so
parallel guesses cannot slip past the limit and a locked account is never authenticated, not even
with the right password; an attempt that signs in is taken back, as it was no failure. Earlier
failures stay counted: were a success to reset its address's count, an attacker holding one valid
account could keep guessing others from that address. While Redis is away each web process counts on
its own, with the same limits (infra.rate_limits).
"""

import hashlib
import math
from dataclasses import dataclass

from django.conf import settings

from infra import rate_limits


@dataclass(frozen=True)
class Attempt:
    """One counted sign-in attempt; `refusal` says why it may not go on ('' when it may)."""

    windows: tuple[rate_limits.Window, ...]
    refusal: str


def begin(username: str, address: str) -> Attempt:
    """Count an attempt for this account and address; refused while either is over its limit."""
    window_s = settings.LOGIN_FAILURE_WINDOW_S
    account_key = hashlib.sha256(username.casefold().encode()).hexdigest()[:32]
    account = rate_limits.hit(f"login:account:{account_key}", window_s)
    from_address = rate_limits.hit(f"login:address:{address}", window_s)
    refusal = ""
    if account.hits > settings.LOGIN_FAILURES_PER_ACCOUNT:
        refusal = f"Too many failed sign-ins for this account; try again in {_minutes(account)}."
    elif from_address.hits > settings.LOGIN_FAILURES_PER_ADDRESS:
        refusal = f"Too many failed sign-ins from your address; try again in {_minutes(from_address)}."
    return Attempt(windows=(account, from_address), refusal=refusal)


def succeeded(attempt: Attempt) -> None:
    """The attempt signed in: it is no failure, so it no longer counts."""
    for window in attempt.windows:
        rate_limits.take_back(window)


def _minutes(window: rate_limits.Window) -> str:
    minutes = math.ceil(window.ends_in_s / 60)
    return "1 minute" if minutes <= 1 else f"{minutes} minutes"

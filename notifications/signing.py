"""Signing a webhook body as Stripe and Slack do: HMAC-SHA256 of "<timestamp>.<body>" under the channel's
secret, sent as `sha256=<hex>` with the Unix timestamp in its own header; and the receiver's check."""

import hashlib
import hmac
import secrets

from notifications.constants import REPLAY_WINDOW_S

SECRET_PREFIX = "whsec_"


def new_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """The X-GPU-Portal-Signature value for `body` sent at `timestamp` (Unix seconds)."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"sha256={mac.hexdigest()}"


def verify(secret: str, timestamp: str, sent_signature: str, body: bytes, *, now: float) -> bool:
    """What a receiver checks: the signature matches, in constant time, and the timestamp is within
    REPLAY_WINDOW_S of its own clock `now` (an older delivery replayed is refused)."""
    try:
        at = int(timestamp)
    except (TypeError, ValueError):
        return False
    if abs(now - at) > REPLAY_WINDOW_S:
        return False
    return hmac.compare_digest(signature(secret, at, body), sent_signature or "")

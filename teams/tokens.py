"""Random bearer credentials (API tokens, node agent credentials): shown once, stored hashed."""

import hashlib
import secrets


def new_token(prefix: str) -> str:
    return f"{prefix}_{secrets.token_urlsafe(32)}"


def hash_token(token: str) -> str:
    """SHA-256 is enough here: tokens are 256 random bits, not guessable passwords."""
    return hashlib.sha256(token.encode()).hexdigest()

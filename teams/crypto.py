"""Team secrets at rest: Fernet (AES-128-CBC with HMAC-SHA256) under TEAM_SECRETS_KEYS, the first key
encrypting and every key decrypting, so keys rotate without re-entering the secrets."""

from functools import lru_cache

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings

__all__ = ["InvalidToken", "decrypt", "encrypt"]


@lru_cache(maxsize=4)
def _box(keys: tuple[str, ...]) -> MultiFernet:
    return MultiFernet([Fernet(key) for key in keys])


def encrypt(value: str) -> str:
    """The value as a Fernet token (url-safe base64 text), under the first key."""
    return _box(tuple(settings.TEAM_SECRETS_KEYS)).encrypt(value.encode()).decode("ascii")


def decrypt(token: str) -> str:
    """The value of a token made by `encrypt` under any of the keys; InvalidToken when none opens it."""
    return _box(tuple(settings.TEAM_SECRETS_KEYS)).decrypt(token.encode("ascii")).decode()

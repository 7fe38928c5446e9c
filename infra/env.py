"""Typed readers for settings that come from the environment.

Each one fails at start with a message naming the variable, so a typo in a
deployment never turns into a silently wrong default.
"""

import base64
import os
from pathlib import Path

from cryptography.fernet import Fernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(
        f"{name}={raw!r} is not a boolean; use one of 1/0, true/false, yes/no, on/off."
    )


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not an integer.") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={value} is below its minimum of {minimum}.")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    items = [item.strip() for item in raw.split(",") if item.strip()]
    if not items:
        raise ImproperlyConfigured(f"{name} is set but names nothing; give a comma-separated list.")
    return items


def env_secret(name: str) -> str:
    """A secret from NAME, or from the file named by NAME_FILE (Docker/Kubernetes secrets)."""
    value = os.environ.get(name)
    path = os.environ.get(f"{name}_FILE")
    if value and path:
        raise ImproperlyConfigured(f"Set either {name} or {name}_FILE, not both.")
    if path:
        try:
            return Path(path).read_text().strip()
        except OSError as error:
            raise ImproperlyConfigured(f"{name}_FILE={path!r} cannot be read: {error.strerror}.") from None
    return value or ""


FERNET_KEY_BYTES = 32


def env_fernet_keys(name: str, *, derive_from: str, purpose: bytes) -> list[str]:
    """Fernet keys from NAME (or NAME_FILE), comma-separated: the first encrypts, all decrypt, so a
    key is rotated by putting a new one first and dropping the old one once nothing uses it.

    Unset: one key derived from `derive_from` (the SECRET_KEY) with HKDF-SHA256 for `purpose`, so the
    embedded default works with nothing set. A key that is not 32 url-safe base64-encoded bytes fails
    at start; the message names its place in the list, never the key.
    """
    raw = env_secret(name)
    if not raw:
        hkdf = HKDF(algorithm=hashes.SHA256(), length=FERNET_KEY_BYTES, salt=None, info=purpose)
        return [base64.urlsafe_b64encode(hkdf.derive(derive_from.encode())).decode()]
    keys = [key.strip() for key in raw.split(",") if key.strip()]
    for place, key in enumerate(keys, start=1):
        try:
            Fernet(key)
        except ValueError:
            raise ImproperlyConfigured(
                f"Key {place} of {len(keys)} in {name} is not a Fernet key (32 url-safe base64-encoded "
                "bytes); make one with: python -c 'from cryptography.fernet import Fernet; "
                "print(Fernet.generate_key().decode())'"
            ) from None
    if not keys:
        raise ImproperlyConfigured(f"{name} is set but names no key; give comma-separated Fernet keys.")
    return keys

"""Idempotency keys: a client names a write with a key of its choosing (the Idempotency-Key header,
as payment APIs take it), and a repeat with the same key gets the first answer instead of a second
write. The HTTP side is infra.api.idempotency; this module keeps the keys.

A key is claimed in the write's own transaction, before the write, and answered in it after: a
crash, a lost connection or a refusal (an exception: bad input, a state conflict) rolls back both,
so a key is stored with an answer exactly when its write was applied, and a refused write may be
sent again with its key. While one transaction holds a claim, a concurrent claim of the same key
waits for it at the unique constraint (PostgreSQL; SQLite runs one writing transaction at a time
anyway), then finds the answer, or, if that write was refused or rolled back, claims the key itself.
"""

import datetime as dt
import hashlib
import json

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from infra.models import IdempotencyKey


class KeyReused(Exception):
    """The key already answered another request (another method, path or body)."""


def request_hash(method: str, path: str, data) -> str:
    """SHA-256 (hex) of the method, the path with its query and the parsed body, keys sorted: the same
    JSON sent with other spacing or key order is the same request."""
    body = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(f"{method}\n{path}\n{body}".encode()).hexdigest()


def claim_key(user, key: str, fingerprint: str) -> tuple[IdempotencyKey, bool]:
    """(the key's row, True) when this transaction now holds the key for its write; (the row with the
    stored answer, False) when the key already answered this same request. KeyReused when it answered
    another. Call inside the write's transaction (transaction.atomic)."""
    while True:
        try:
            with transaction.atomic():
                return IdempotencyKey.objects.create(user=user, key=key, request_hash=fingerprint), True
        except IntegrityError:
            stored = IdempotencyKey.objects.filter(user=user, key=key).first()
        if stored is None:
            continue  # forgotten (expired) between the two statements: claim it afresh
        if stored.request_hash != fingerprint:
            raise KeyReused(key)
        return stored, False


def answer_key(claim: IdempotencyKey, status: int, body: str) -> None:
    """Keep the write's answer under its claimed key, in the write's transaction."""
    claim.status, claim.body = status, body
    claim.save(update_fields=["status", "body"])


def forget_expired_keys() -> int:
    """Drop the keys older than IDEMPOTENCY_KEY_TTL_S (Celery beat's idempotency-keys; the embedded
    worker with its upkeep); returns how many. A repeat after that is a new write."""
    cutoff = timezone.now() - dt.timedelta(seconds=settings.IDEMPOTENCY_KEY_TTL_S)
    deleted, _ = IdempotencyKey.objects.filter(created_at__lt=cutoff).delete()
    return deleted
